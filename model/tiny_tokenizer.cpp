// The random targets' tokenizer (model/tiny_tokenizer.h): byte-level BPE merges learnt from a
// built-in English text, Qwen2's pre-tokenizer, the added chat tokens, and a Qwen3-like ChatML
// chat template, serialized as Hugging Face's tokenizer.json and tokenizer_config.json.
#include "model/tiny_tokenizer.h"

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "runtime/error.h"
#include "runtime/fileio.h"

namespace dflash {

namespace {

using ojson = nlohmann::ordered_json;

// The text the merges are learnt from: plain English of the kinds a chat model answers (everyday
// questions, arithmetic, code), so that common words become few tokens.
constexpr const char* kCorpus = R"text(
The assistant answers questions in plain and friendly English. When a user asks for help, the
assistant explains each step, gives an example, and checks that the answer is correct.
What is the capital of France? The capital of France is Paris, a city on the river Seine.
How many days are there in a week? There are seven days in a week, and each day has 24 hours.
Please write a short poem about the sea. The sea is wide and the waves are blue; the wind sings
over the water, and the boats come home at night.
Can you help me plan a trip? Of course. First choose where you would like to go, then find a
place to stay, and then make a list of the things you want to see and do there.
If a train leaves at 3 o'clock and the trip takes 2 hours, it arrives at 5 o'clock.
To add two numbers, write them one under the other and add the digits from right to left. For
example, 12 + 30 = 42, and 7 + 8 = 15, so we write 5 and carry 1 to the next column.
The answer is 42. Let me think about this step by step. First, we find the total; then we
divide the total by the number of people, so each person gets the same share.
Here is a function in Python that returns the sum of a list of numbers:
def total(numbers):
    result = 0
    for n in numbers:
        result = result + n
    return result
The function takes a list, starts from zero, adds each number in turn, and returns the result.
You can test it with print(total([1, 2, 3])), which prints 6.
Thank you for your question. I hope this helps! Let me know if you have any other questions.
Why is the sky blue? Sunlight is made of many colors. When it passes through the air, the blue
light is scattered more than the red light, so we see blue light coming from every part of the sky.
What should I cook for dinner tonight? A simple meal is pasta with tomato sauce: boil the water,
cook the pasta, warm the sauce in a pan, and mix them together with some cheese on top.
Tell me a fun fact about animals. An octopus has three hearts, and a group of owls is called a
parliament. Cats sleep for about twelve to sixteen hours every day.
How do I learn a new language? Practice a little every day, read simple stories, listen to
people who speak it, and do not be afraid of making mistakes, because that is how we learn.
The user said that the code did not work. The assistant read the error message, found the line
where the problem was, and explained how to fix it: the variable was used before it was defined.
Summarize the story in one sentence. A young girl finds a lost dog, takes care of it for a week,
and returns it to its owner, who thanks her with a warm smile and a basket of apples.
Is it better to study in the morning or in the evening? It depends on the person. Some people
think more clearly in the morning, while others find it easier to focus later in the day.
Write a list of three healthy habits: drink enough water, go for a walk every day, and sleep
at least seven hours each night. These habits are simple, but they make a real difference.
Convert 5 kilometers to miles. One kilometer is about 0.62 miles, so 5 kilometers is about 3.1 miles.
What does this sentence mean? It means that the weather will change soon, so we should be ready.
The system prompt says: You are a helpful assistant. Answer briefly and clearly.
)text";

// GPT-2's byte-to-unicode map: printable bytes stand for themselves, the others for 256 + n.
std::vector<std::string> byte_symbols() {
  auto utf8 = [](uint32_t cp) {
    std::string s;
    if (cp < 0x80) {
      s += char(cp);
    } else {  // every code point here is below 0x800
      s += char(0xC0 | (cp >> 6));
      s += char(0x80 | (cp & 0x3F));
    }
    return s;
  };
  std::vector<std::string> out(256);
  uint32_t next = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const bool printable = (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
    out[b] = utf8(printable ? b : next++);
  }
  return out;
}

bool is_letter(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }
bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }
bool is_newline(char c) { return c == '\n' || c == '\r'; }

// The pieces Qwen2's pre-tokenizer pattern (kSplitPattern) cuts ASCII text into: contractions, a
// word with one leading non-letter, single digits, punctuation runs with an optional leading space
// and trailing newlines, and whitespace runs (the last space of a run before a word goes with it).
std::vector<std::string> ascii_pieces(const std::string& text) {
  std::vector<std::string> out;
  const size_t n = text.size();
  size_t i = 0;
  auto at = [&](size_t k) { return k < n ? text[k] : '\0'; };
  while (i < n) {
    size_t j = i;
    const char c = text[i];
    if (c == '\'') {
      for (const char* s : {"s", "t", "re", "ve", "m", "ll", "d"}) {
        const std::string suffix(s);
        if (text.compare(i + 1, suffix.size(), suffix) == 0 && !is_letter(at(i + 1 + suffix.size()))) {
          j = i + 1 + suffix.size();
          break;
        }
      }
    }
    if (j == i && (is_letter(c) || (!is_newline(c) && !is_digit(c) && is_letter(at(i + 1))))) {
      j = i + 1;
      while (j < n && is_letter(text[j])) ++j;
    } else if (j == i && is_digit(c)) {
      j = i + 1;
    } else if (j == i && !is_space(c)) {
      while (j < n && !is_space(text[j]) && !is_letter(text[j]) && !is_digit(text[j])) ++j;
      while (j < n && is_newline(text[j])) ++j;
    } else if (j == i && c == ' ' && i + 1 < n && !is_space(at(i + 1)) && !is_digit(at(i + 1))) {
      j = i + 1;  // a space before punctuation
      while (j < n && !is_space(text[j]) && !is_letter(text[j]) && !is_digit(text[j])) ++j;
      while (j < n && is_newline(text[j])) ++j;
    } else if (j == i) {
      while (j < n && is_space(text[j])) ++j;
      size_t last_newline = j;
      for (size_t k = i; k < j; ++k)
        if (is_newline(text[k])) last_newline = k + 1;
      if (last_newline != j) j = last_newline;                                  // \s*[\r\n]+
      else if (j < n && j - i > 1) --j;                                        // \s+(?!\S)
    }
    out.push_back(text.substr(i, j - i));
    i = j;
  }
  return out;
}

// The merges (pairs of token ids) that fill a vocabulary of vocab_size; tokens[] holds the
// byte-level strings of ids 0 .. vocab_size - 7 when it returns.
std::vector<std::pair<int, int>> learn_merges(int64_t vocab_size, std::vector<std::string>& tokens) {
  const std::vector<std::string> bytes = byte_symbols();
  tokens = bytes;
  std::unordered_map<std::string, int> id;
  for (int b = 0; b < 256; ++b) id[bytes[size_t(b)]] = b;
  const std::set<std::string> reserved(kTinyTokenizerSpecials.begin(), kTinyTokenizerSpecials.end());
  const int64_t wanted = vocab_size - kTinyTokenizerMinVocab;
  std::vector<std::pair<int, int>> merges;
  auto add = [&](int a, int b) {
    const std::string s = tokens[size_t(a)] + tokens[size_t(b)];
    if (id.count(s) || reserved.count(s)) return false;
    id[s] = int(tokens.size());
    tokens.push_back(s);
    merges.push_back({a, b});
    return true;
  };

  std::map<std::string, int64_t> counts;  // piece -> occurrences (ordered: the same on every run)
  for (const std::string& p : ascii_pieces(kCorpus)) ++counts[p];
  std::vector<std::pair<std::vector<int>, int64_t>> words;
  for (const auto& [piece, count] : counts) {
    std::vector<int> symbols;
    for (unsigned char ch : piece) symbols.push_back(int(ch));
    words.push_back({symbols, count});
  }
  std::set<std::pair<int, int>> refused;  // pairs whose string is already a token
  while (int64_t(merges.size()) < wanted) {
    std::map<std::pair<int, int>, int64_t> pairs;
    for (const auto& [symbols, count] : words)
      for (size_t k = 0; k + 1 < symbols.size(); ++k) pairs[{symbols[k], symbols[k + 1]}] += count;
    std::pair<int, int> best{-1, -1};
    int64_t best_count = 1;  // a pair must occur at least twice
    for (const auto& [pair, count] : pairs)
      if (count > best_count && !refused.count(pair)) best = pair, best_count = count;  // ties: the smaller pair
    if (best.first < 0) break;
    if (!add(best.first, best.second)) {
      refused.insert(best);
      continue;
    }
    const int merged = int(tokens.size()) - 1;
    for (auto& [symbols, count] : words) {
      std::vector<int> next;
      for (size_t k = 0; k < symbols.size(); ++k) {
        if (k + 1 < symbols.size() && symbols[k] == best.first && symbols[k + 1] == best.second) {
          next.push_back(merged);
          ++k;
        } else {
          next.push_back(symbols[k]);
        }
      }
      symbols = std::move(next);
    }
  }
  // The text ran out of pairs: (token, byte) in id order, skipping strings already taken.
  for (size_t t = 0; int64_t(merges.size()) < wanted; ++t)
    for (int b = 0; b < 256 && int64_t(merges.size()) < wanted; ++b) add(int(t), b);
  return merges;
}

// Qwen2's pre-tokenizer pattern.
constexpr const char* kSplitPattern =
    R"re((?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+)re";

// ChatML as Qwen3's template renders it: the system turn first, user and assistant turns
// `<|im_start|>role\n...<|im_end|>\n`, tool results as a user turn of <tool_response> blocks;
// an assistant turn's reasoning (reasoning_content, or a <think> block in its content) is kept
// only after the last user turn, where the final answer always gets a think block (empty when it
// has none); add_generation_prompt opens an assistant turn, with an empty think block when
// enable_thinking is false.
constexpr const char* kChatTemplate = R"jinja({%- if messages and messages[0].role == 'system' %}
    {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
{%- endif %}
{%- set ns = namespace(last_user=-1) %}
{%- for message in messages %}
    {%- if message.role == 'user' %}
        {%- set ns.last_user = loop.index0 %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- set content = message.content if message.content is string else '' %}
    {%- if message.role == 'user' or (message.role == 'system' and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + content + '<|im_end|>\n' }}
    {%- elif message.role == 'assistant' %}
        {%- set reasoning = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning = message.reasoning_content %}
        {%- elif '</think>' in content %}
            {%- set reasoning = content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- set content = content.split('</think>')[-1].lstrip('\n') %}
        {%- endif %}
        {%- if loop.index0 > ns.last_user and (loop.last or reasoning) %}
            {{- '<|im_start|>assistant\n<think>\n' + reasoning.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
        {%- else %}
            {{- '<|im_start|>assistant\n' + content }}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == 'tool' %}
        {%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' + content + '\n</tool_response>' }}
        {%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})jinja";

// <think> and </think> are plain added tokens (kept when decoding without special tokens), as Qwen3's.
bool special(size_t i) { return i != 3 && i != 4; }

std::string json_string(const std::string& s) { return ojson(s).dump(); }

}  // namespace

TinyTokenizerFiles tiny_tokenizer_files(int64_t vocab_size) {
  DF_CHECK(vocab_size >= kTinyTokenizerMinVocab,
           "tiny tokenizer: vocab_size " << vocab_size << " cannot hold the 256 byte symbols and the "
                                         << kTinyTokenizerSpecials.size() << " chat tokens; fix: set "
                                         << "target.synthetic.vocab_size to at least " << kTinyTokenizerMinVocab);
  std::vector<std::string> tokens;
  const std::vector<std::pair<int, int>> merges = learn_merges(vocab_size, tokens);
  DF_CHECK(int64_t(tokens.size()) + int64_t(kTinyTokenizerSpecials.size()) == vocab_size,
           "tiny tokenizer: " << tokens.size() << " model tokens for vocab_size " << vocab_size);

  const ojson byte_level = {{"type", "ByteLevel"}, {"add_prefix_space", false}, {"trim_offsets", false},
                            {"use_regex", false}};
  ojson added = ojson::array();
  for (size_t i = 0; i < kTinyTokenizerSpecials.size(); ++i)
    added.push_back({{"id", tiny_tokenizer_special_id(vocab_size, i)}, {"content", kTinyTokenizerSpecials[i]},
                     {"single_word", false}, {"lstrip", false}, {"rstrip", false}, {"normalized", false},
                     {"special", special(i)}});
  const ojson pre = {{"type", "Sequence"},
                     {"pretokenizers",
                      {{{"type", "Split"}, {"pattern", {{"Regex", kSplitPattern}}}, {"behavior", "Isolated"},
                        {"invert", false}},
                       byte_level}}};
  // The vocabulary and merges are written one entry a line (an ordered_json object would insert in
  // quadratic time at real vocabulary sizes).
  std::string j = "{\n  \"version\": \"1.0\",\n  \"truncation\": null,\n  \"padding\": null,\n";
  j += "  \"added_tokens\": " + added.dump() + ",\n";
  j += "  \"normalizer\": " + ojson({{"type", "NFC"}}).dump() + ",\n";
  j += "  \"pre_tokenizer\": " + pre.dump() + ",\n";
  j += "  \"post_processor\": " + byte_level.dump() + ",\n";
  j += "  \"decoder\": " + byte_level.dump() + ",\n";
  j += "  \"model\": {\n    \"type\": \"BPE\",\n    \"dropout\": null,\n    \"unk_token\": null,\n"
       "    \"continuing_subword_prefix\": \"\",\n    \"end_of_word_suffix\": \"\",\n    \"fuse_unk\": false,\n"
       "    \"byte_fallback\": false,\n    \"ignore_merges\": false,\n    \"vocab\": {";
  for (size_t t = 0; t < tokens.size(); ++t)
    j += std::string(t ? "," : "") + "\n      " + json_string(tokens[t]) + ": " + std::to_string(t);
  j += "\n    },\n    \"merges\": [";
  for (size_t m = 0; m < merges.size(); ++m)
    j += std::string(m ? "," : "") + "\n      [" + json_string(tokens[size_t(merges[m].first)]) + ", " +
         json_string(tokens[size_t(merges[m].second)]) + "]";
  j += "\n    ]\n  }\n}\n";

  ojson decoder = ojson::object();
  for (size_t i = 0; i < kTinyTokenizerSpecials.size(); ++i)
    decoder[std::to_string(tiny_tokenizer_special_id(vocab_size, i))] = {
        {"content", kTinyTokenizerSpecials[i]}, {"lstrip", false}, {"normalized", false}, {"rstrip", false},
        {"single_word", false}, {"special", special(i)}};
  const ojson config = {{"tokenizer_class", "PreTrainedTokenizerFast"},
                        {"added_tokens_decoder", decoder},
                        {"bos_token", nullptr},
                        {"eos_token", "<|im_end|>"},
                        {"pad_token", "<|endoftext|>"},
                        {"mask_token", "<|mask|>"},
                        {"unk_token", nullptr},
                        {"add_bos_token", false},
                        {"add_prefix_space", false},
                        {"clean_up_tokenization_spaces", false},
                        {"split_special_tokens", false},
                        {"model_max_length", 32768},
                        {"chat_template", kChatTemplate}};
  return {j, config.dump(2) + "\n"};
}

bool write_tiny_tokenizer(const std::filesystem::path& dir, int64_t vocab_size) {
  if (vocab_size < kTinyTokenizerMinVocab) return false;
  const TinyTokenizerFiles files = tiny_tokenizer_files(vocab_size);
  write_file_atomic(dir / "tokenizer.json", files.tokenizer_json);
  write_file_atomic(dir / "tokenizer_config.json", files.tokenizer_config_json);
  return true;
}

}  // namespace dflash

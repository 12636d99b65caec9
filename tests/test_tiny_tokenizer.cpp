// The random targets' tokenizer (model/tiny_tokenizer.h) without Python: the vocabulary is exactly
// vocab_size, the chat tokens take the last ids (the mask token last), every merge joins two
// earlier tokens into the next id, the files are the same bytes every time, write_random_target
// writes them beside config.json (no eos_token_id there) and only when the vocabulary holds them,
// and the tiny configs' drafter.mask_token_id is <|mask|>. python/tests/test_tiny_target_tokenizer.py
// loads the files with transformers.
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "model/target.h"
#include "model/tiny_tokenizer.h"
#include "runtime/fileio.h"
#include "tests/target_fixtures.h"
#include "tests/test_util.h"
#include "train/config.h"

using namespace dflash;
using namespace dflash::test;

namespace {

// The byte-level symbol of byte b (GPT-2's map), as UTF-8.
std::string byte_symbol(uint32_t cp) {
  std::string s;
  if (cp < 0x80) s += char(cp);
  else s += char(0xC0 | (cp >> 6)), s += char(0x80 | (cp & 0x3F));
  return s;
}

// Checks the structure of tokenizer.json for vocab_size V; returns its merges as "a b" strings.
std::vector<std::string> check_tokenizer_json(const json& t, int64_t V) {
  const json& model = t.at("model");
  CHECK(model.at("type") == "BPE");
  CHECK(model.at("byte_fallback") == false);
  CHECK(t.at("pre_tokenizer").at("pretokenizers").at(1).at("type") == "ByteLevel");
  CHECK(t.at("decoder").at("type") == "ByteLevel");
  const json& vocab = model.at("vocab");
  REQUIRE(int64_t(vocab.size()) == V - kTinyTokenizerMinVocab + 256);
  std::vector<std::string> by_id(vocab.size());
  for (const auto& [token, id] : vocab.items()) {
    REQUIRE(id.get<int64_t>() >= 0);
    REQUIRE(id.get<size_t>() < by_id.size());
    CHECK(by_id[id.get<size_t>()].empty());  // each id once
    by_id[id.get<size_t>()] = token;
  }
  // Bytes in byte order: printable ones stand for themselves, space is U+0120 (Ġ), newline U+010A (Ċ).
  CHECK(by_id[65] == "A");
  CHECK(by_id[126] == "~");
  CHECK(by_id[32] == byte_symbol(0x120));
  CHECK(by_id[10] == byte_symbol(0x10A));
  CHECK(by_id[0] == byte_symbol(0x100));
  // Every merge joins two tokens of smaller ids into the next id.
  const json& merges = model.at("merges");
  REQUIRE(int64_t(merges.size()) == V - kTinyTokenizerMinVocab);
  std::vector<std::string> pairs;
  for (size_t m = 0; m < merges.size(); ++m) {
    const std::string a = merges[m].at(0), b = merges[m].at(1);
    CAPTURE(m);
    REQUIRE(vocab.contains(a));
    REQUIRE(vocab.contains(b));
    CHECK(vocab.at(a).get<size_t>() < 256 + m);
    CHECK(vocab.at(b).get<size_t>() < 256 + m);
    CHECK(by_id[256 + m] == a + b);
    pairs.push_back(a + " " + b);
  }
  // The chat tokens: the last six ids, in order, none of them a model token.
  const json& added = t.at("added_tokens");
  REQUIRE(added.size() == kTinyTokenizerSpecials.size());
  for (size_t i = 0; i < added.size(); ++i) {
    CHECK(added[i].at("id") == tiny_tokenizer_special_id(V, i));
    CHECK(added[i].at("content") == kTinyTokenizerSpecials[i]);
    CHECK(added[i].at("normalized") == false);
    CHECK_FALSE(vocab.contains(kTinyTokenizerSpecials[i]));
  }
  CHECK(added.back().at("content") == "<|mask|>");
  CHECK(added.back().at("id") == V - 1);
  CHECK(added.back().at("special") == true);
  CHECK(added[3].at("special") == false);  // <think> and </think> survive skip_special_tokens, as Qwen3's
  return pairs;
}

}  // namespace

TEST_SUITE("tiny-tokenizer") {
  TEST_CASE("the vocabulary is exactly vocab_size: bytes, merges, then the chat tokens with <|mask|> last") {
    for (int64_t V : {kTinyTokenizerMinVocab, int64_t(512), int64_t(1000), int64_t(3000)}) {
      CAPTURE(V);
      const TinyTokenizerFiles f = tiny_tokenizer_files(V);
      check_tokenizer_json(json::parse(f.tokenizer_json), V);
    }
    // The merges come from English text: the commonest words are single tokens.
    const json vocab = json::parse(tiny_tokenizer_files(512).tokenizer_json).at("model").at("vocab");
    for (const char* word : {"the", "and", "is"}) {
      CAPTURE(word);
      CHECK(vocab.contains(byte_symbol(0x120) + word));  // with its leading space
    }
  }

  TEST_CASE("the same vocab_size gives the same bytes; a smaller vocabulary's merges begin a larger one's") {
    const TinyTokenizerFiles a = tiny_tokenizer_files(512), b = tiny_tokenizer_files(512);
    CHECK(a.tokenizer_json == b.tokenizer_json);
    CHECK(a.tokenizer_config_json == b.tokenizer_config_json);
    const std::vector<std::string> small = check_tokenizer_json(json::parse(a.tokenizer_json), 512);
    const std::vector<std::string> large = check_tokenizer_json(json::parse(tiny_tokenizer_files(3000).tokenizer_json), 3000);
    REQUIRE(large.size() > small.size());
    CHECK(std::equal(small.begin(), small.end(), large.begin()));
    CHECK(std::set<std::string>(large.begin(), large.end()).size() == large.size());
  }

  TEST_CASE("tokenizer_config.json: eos <|im_end|>, the mask token, and a ChatML template with Qwen3's switches") {
    const json c = json::parse(tiny_tokenizer_files(512).tokenizer_config_json);
    CHECK(c.at("eos_token") == "<|im_end|>");
    CHECK(c.at("pad_token") == "<|endoftext|>");
    CHECK(c.at("mask_token") == "<|mask|>");
    CHECK(c.at("bos_token").is_null());
    const json& decoder = c.at("added_tokens_decoder");
    REQUIRE(decoder.size() == kTinyTokenizerSpecials.size());
    for (size_t i = 0; i < kTinyTokenizerSpecials.size(); ++i)
      CHECK(decoder.at(std::to_string(tiny_tokenizer_special_id(512, i))).at("content") == kTinyTokenizerSpecials[i]);
    const std::string t = c.at("chat_template");
    for (const char* part : {"'<|im_start|>' + message.role + '\\n'", "<|im_end|>\\n", "add_generation_prompt",
                             "enable_thinking is defined and enable_thinking is false", "'<think>\\n\\n</think>\\n\\n'",
                             "reasoning_content", "ns.last_user"}) {
      CAPTURE(part);
      CHECK(t.find(part) != std::string::npos);
    }
  }

  TEST_CASE("a vocabulary without room for the bytes and the chat tokens gets no tokenizer") {
    TempDir tmp;
    CHECK_FALSE(write_tiny_tokenizer(tmp.path, kTinyTokenizerMinVocab - 1));
    CHECK(tmp.listing().empty());
    CHECK_ERROR(tiny_tokenizer_files(100), "set target.synthetic.vocab_size to at least 262");
    CHECK(write_tiny_tokenizer(tmp.path, kTinyTokenizerMinVocab));
    CHECK(tmp.listing() == std::vector<std::string>{"tokenizer.json", "tokenizer_config.json"});
  }

  TEST_CASE("write_random_target writes the tokenizer beside config.json, which names no eos_token_id") {
    TempDir tmp;
    SyntheticTargetConfig c = small_config("qwen3");
    c.vocab_size = 512;
    write_random_target(tmp / "big", c);
    CHECK(read_file_text(tmp / "big" / "tokenizer.json") == tiny_tokenizer_files(512).tokenizer_json);
    CHECK(read_file_text(tmp / "big" / "tokenizer_config.json") == tiny_tokenizer_files(512).tokenizer_config_json);
    const json config = json::parse(read_file_text(tmp / "big" / "config.json"));
    CHECK(config.at("vocab_size") == 512);
    CHECK_FALSE(config.contains("eos_token_id"));  // spec would stop at it
    write_random_target(tmp / "small", small_config("llama"));  // vocab 48: no room
    CHECK_FALSE(fs::exists(tmp / "small" / "tokenizer.json"));
    CHECK(fs::exists(tmp / "small" / "config.json"));
  }

  TEST_CASE("the tiny configs' mask token is the tokenizer's <|mask|>, and the walk-through's target is the tiny job's") {
    const fs::path root(DFLASH_SOURCE_DIR);
    const Config tiny = load_config(root / "configs/tiny.toml");
    const Config target = load_config(root / "configs/walkthrough/tiny-target.toml");
    const Config chat = load_config(root / "configs/walkthrough/tiny-chat.toml");
    const int64_t V = tiny.target.synthetic.vocab_size;
    CHECK(V >= kTinyTokenizerMinVocab);
    CHECK(tiny.drafter.mask_token_id == tiny_tokenizer_special_id(V, kTinyTokenizerSpecials.size() - 1));
    const SyntheticTargetConfig &a = tiny.target.synthetic, &b = target.target.synthetic;
    CHECK(b.enabled);
    CHECK((a.architecture == b.architecture && a.vocab_size == b.vocab_size && a.hidden_size == b.hidden_size &&
           a.intermediate_size == b.intermediate_size && a.num_hidden_layers == b.num_hidden_layers &&
           a.num_attention_heads == b.num_attention_heads && a.num_key_value_heads == b.num_key_value_heads &&
           a.head_dim == b.head_dim && a.rope_theta == b.rope_theta && a.init_std == b.init_std && a.seed == b.seed));
    CHECK(chat.target.path == target.target.path);
    CHECK_FALSE(chat.target.synthetic.enabled);  // the target comes from tiny-target.toml, as a download would
    CHECK(chat.drafter.mask_token_id == tiny.drafter.mask_token_id);
    CHECK(target.drafter.mask_token_id == tiny.drafter.mask_token_id);
  }
}

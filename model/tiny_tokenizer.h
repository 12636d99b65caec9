// The tokenizer of the random targets (the tiny job's and the walk-through's, docs/USER_GUIDE.md
// section 2): a Hugging Face `tokenizers` byte-level BPE and a Qwen3-like ChatML chat template,
// written beside the target's config.json so that transformers' AutoTokenizer, `dflash-data
// prepare` and `dflash-data bench` work on a random target as on a real one.
//
// Ids, for a vocabulary of V (exactly the target's vocab_size):
//   0 .. 255      the 256 byte-level symbols (GPT-2's byte-to-unicode map), in byte order;
//   256 .. V-7    merges, learnt deterministically from a built-in English text (ties broken by
//                 the smaller pair of ids), then, if that text runs out of pairs, filler merges of
//                 (token, byte) in id order; the merges of a smaller V are a prefix of a larger one's;
//   V-6 .. V-1    the added tokens <|endoftext|>, <|im_start|>, <|im_end|>, <think>, </think>,
//                 <|mask|> (the last one is the drafter's mask token: ordinary text never gives it).
// tokenizer_config.json names eos_token <|im_end|>, pad_token <|endoftext|> and mask_token
// <|mask|>. No eos_token_id goes into config.json: `spec` (and spec_tau, and `dflash-data bench`)
// stop at that id, which a random target emits at arbitrary points.
#pragma once
#include <array>
#include <cstdint>
#include <filesystem>
#include <string>

namespace dflash {

// The added tokens, in id order at the end of the vocabulary; the last is the mask token.
inline constexpr std::array<const char*, 6> kTinyTokenizerSpecials = {
    "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "<|mask|>"};
// The smallest vocabulary that holds the byte symbols and the added tokens (no merges).
inline constexpr int64_t kTinyTokenizerMinVocab = 256 + int64_t(kTinyTokenizerSpecials.size());

// The id of kTinyTokenizerSpecials[i] in a vocabulary of vocab_size.
inline int64_t tiny_tokenizer_special_id(int64_t vocab_size, size_t i) {
  return vocab_size - int64_t(kTinyTokenizerSpecials.size()) + int64_t(i);
}

struct TinyTokenizerFiles {
  std::string tokenizer_json;         // tokenizer.json
  std::string tokenizer_config_json;  // tokenizer_config.json, with the chat template
};

// The two files' contents for a vocabulary of vocab_size (>= kTinyTokenizerMinVocab); the same
// vocab_size always gives the same bytes.
TinyTokenizerFiles tiny_tokenizer_files(int64_t vocab_size);

// Writes dir/tokenizer.json and dir/tokenizer_config.json (each atomically) and returns true; a
// vocab_size below kTinyTokenizerMinVocab cannot hold the byte alphabet, so nothing is written and
// it returns false.
bool write_tiny_tokenizer(const std::filesystem::path& dir, int64_t vocab_size);

}  // namespace dflash

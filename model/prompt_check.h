// The check of one prompt before decoding, shared by batched generation (check_generate_request)
// and speculative decoding (check_decode_prompt), whose messages differ in a few words only.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

namespace dflash {

// The words a caller's messages use where the two callers differ; the rest of each message is common.
struct PromptCheckWords {
  const char* empty;     // the message after "WHERE: " for an empty prompt
  const char* token;     // before an id outside the vocabulary, e.g. "token "
  const char* outside;   // between "at position I" and " the target's vocabulary", e.g. " is outside"
  const char* max_new;   // the setting the fixes tell to lower, e.g. "max_new_tokens"
  const char* capacity;  // after "beyond the CAPACITY": what holds that many positions, and the fix
};

// Refuses an empty prompt, an id outside [0, vocab), max_new < 1, and prompt + max_new beyond
// max_positions (when > 0: the target's max_position_embeddings) or beyond capacity (the KV
// caches' positions); reaching either exactly is allowed. `where` starts every message.
void check_prompt(const std::vector<int32_t>& prompt, int64_t max_new, int64_t vocab, int64_t capacity,
                  int64_t max_positions, const std::string& where, const PromptCheckWords& words);

}  // namespace dflash

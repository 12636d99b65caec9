// The check of one prompt before decoding (model/prompt_check.h).
#include "model/prompt_check.h"

#include "runtime/error.h"

namespace dflash {

void check_prompt(const std::vector<int32_t>& prompt, int64_t max_new, int64_t vocab, int64_t capacity,
                  int64_t max_positions, const std::string& where, const PromptCheckWords& words) {
  DF_CHECK(!prompt.empty(), where << ": " << words.empty);
  for (size_t i = 0; i < prompt.size(); ++i)
    DF_CHECK(prompt[i] >= 0 && prompt[i] < vocab, where << ": " << words.token << prompt[i] << " at position " << i
                                                        << words.outside << " the target's vocabulary [0, " << vocab
                                                        << "); fix: tokenize with the target's tokenizer");
  DF_CHECK(max_new >= 1, where << ": max_new_tokens is " << max_new << "; it must be >= 1");
  const int64_t need = int64_t(prompt.size()) + max_new;
  DF_CHECK(max_positions <= 0 || need <= max_positions,
           where << ": the prompt's " << prompt.size() << " tokens plus max_new_tokens " << max_new << " = " << need
                 << " positions, beyond the target's max_position_embeddings " << max_positions
                 << "; fix: shorten the prompt or lower " << words.max_new);
  DF_CHECK(need <= capacity, where << ": the prompt's " << prompt.size() << " tokens plus max_new_tokens " << max_new
                                   << " = " << need << " positions, beyond the " << capacity << words.capacity);
}

}  // namespace dflash

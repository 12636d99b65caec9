// The real acceptance length (docs/MODEL.md, "Speculative decoding"):
// prompts, stop ids, one prompt decoded with the drafter and by the target alone with the
// lossless check, and the figures (tau macro and micro, SGLang's accept length, the histogram of
// accepted lengths, tokens per second and the speedup). `dflash-train spec` and training's
// spec_tau use it.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data.h"
#include "model/spec_decoder.h"
#include "train/config.h"

namespace dflash {

struct SpecPrompt {
  std::vector<int32_t> ids;
  std::string where;  // "prompts.jsonl line 3", for messages
};

// {"input_ids": [...]} per line (blank lines skipped); a line that also has a loss_mask (training
// data) gives its input_ids before the first loss_mask = 1. Errors name the file and the line.
std::vector<SpecPrompt> read_spec_prompts(const std::filesystem::path& file);
// Each sequence of `data` cut before its first loss_mask = 1 position; sequences without such a
// cut (no prompt part, or no response) are skipped and counted in *skipped.
std::vector<SpecPrompt> spec_prompts_from_data(const Dataset& data, int64_t* skipped);
// eval.spec_stop_token_ids, or none with eval.spec_ignore_eos, else the target's eos_token_id.
// *source says which ("the target's eos_token_id", ...).
std::vector<int32_t> spec_stop_ids(const EvalConfig& eval, const std::filesystem::path& target_dir, int64_t vocab,
                                   std::string* source);

// One prompt decoded with the drafter (and, with a baseline, by the target alone).
struct SpecPromptResult {
  std::string where;
  int64_t prompt_tokens = 0;
  int64_t new_tokens = 0;          // completion tokens (the prefill's included)
  std::vector<int64_t> produced;   // every round's tokens put into the output (SpecRound::produced)
  std::vector<int64_t> accepted;   // every round's a + 1 (before the budget and stop cut)
  std::vector<int32_t> output;     // prompt + completion, as decoded with the drafter
  double spec_s = 0;               // decode time with the drafter (prefill excluded)
  std::optional<double> target_s;  // decode time of the target alone, when it ran
  // The lossless check (when the target alone ran): the first position where the outputs differ
  // (-1: none), the target's top-2 margin and chosen logit there, and the tolerance applied.
  int64_t first_difference = -1;
  float margin = 0, logit = 0, tolerance = 0;
  double tau() const;
};

// The tolerance for a difference on a bf16 device: a flip is numerical noise when the target's
// top-2 margin is at most 2^-5 of its logit's magnitude (at least 2^-5).
float bf16_margin_tolerance(float logit);

// The prompt's random stream when sampling: a function of the seed and the prompt's index only,
// so a prompt draws the same numbers whichever worker decodes it.
uint64_t spec_sample_key(uint64_t seed, size_t prompt_index);
// temperature, top_p and top_k of [eval] into the decoder's options.
void apply_spec_sampling(const EvalConfig& eval, SpecDecoderOptions& options);

// Decodes p with the drafter; with `baseline`, also by the target alone, and checks that the two
// outputs are equal (greedy only: sampled outputs differ run to run in what they draw). exact (the CPU, f32): any difference is an error naming the prompt and the
// position. Otherwise (bf16 on a GPU): a difference is an error unless the target's top-2 margin
// there is within bf16_margin_tolerance; a tolerated one is reported in the result.
SpecPromptResult measure_spec_prompt(SpecDecoder& decoder, const SpecPrompt& p, int64_t max_new,
                                     const std::vector<int32_t>& stop_ids, bool baseline, bool exact,
                                     uint64_t sample_key = 0);

struct SpecFigures {
  int64_t block_size = 0, prompts = 0, rounds = 0, new_tokens = 0;
  // Each round counts the tokens it produced (z-lab's dflash_generate): a + 1, clipped to the
  // budget and cut after a stop token.
  double tau = 0;            // mean over prompts (with a round) of each one's mean count (z-lab's macro mean)
  double tau_micro = 0;      // mean count over every round
  double accept_length = 0;  // SGLang's spec_accept_length: mean over prompts of new tokens / verify passes
  std::vector<int64_t> histogram;  // [bs]: rounds that produced 1, 2, ..., bs tokens
  std::vector<double> prompt_tau;
  bool timed = false;  // with the target-alone baseline:
  double tokens_per_s = 0, tokens_per_s_target = 0, speedup = 0;  // 1 / mean TPOT; TPOT ratio
  int64_t tolerated = 0;  // bf16 differences within the tolerance
  nlohmann::json to_json() const;
  std::vector<std::string> lines() const;  // the human-readable summary
};
SpecFigures summarize_spec(const std::vector<SpecPromptResult>& results, int64_t block_size);
// "prompt 2/4 (prompts.jsonl line 2): 4 + 40 tokens, 37 rounds, tau 1.081, ..."
std::string spec_prompt_line(const SpecPromptResult& r, size_t index, size_t count);

// One JSON line of `spec --output`: where, prompt_ids, output_ids (the completion), finish
// ("stop" | "length"), produced_per_round, accepted_per_round (a + 1), tau, new_tokens.
nlohmann::json spec_output_record(const SpecPromptResult& r, const std::vector<int32_t>& stop_ids);

// `dflash-train spec --config FILE --drafter DIR [--prompts FILE.jsonl] [--max-new-tokens N]
// [--output FILE.jsonl]`.
struct SpecCommandOptions {
  std::filesystem::path drafter;
  std::filesystem::path prompts;         // empty: data.eval's prompts
  std::filesystem::path output;          // empty: none; else one spec_output_record per prompt
  std::optional<int64_t> max_new_tokens;  // empty: eval.spec_max_new_tokens
  int32_t rollback_bias = 0;             // test hook: a deliberately wrong rollback (0 in real use)
};
SpecFigures run_spec(const Config& cfg, const SpecCommandOptions& options);

}  // namespace dflash

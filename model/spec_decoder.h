// Greedy speculative decoding with the target and a DFlash drafter, batch 1 (docs/MODEL.md,
// "Speculative decoding"), and the target-alone baseline.
// Every pass is a program over fixed shapes, recorded at construction like training's (the
// prefill chunk, the drafter's block, the verify block, the one-token step), over the target's
// and drafter's KV caches and a device-side state; decoding only replays them, and the host
// reads back one small result per round (a, the bonus token, the block).
#pragma once
#include <cstdint>
#include <memory>
#include <vector>

#include "graphs/engine.h"
#include "graphs/static_io.h"
#include "kernels/cpu/decode_kernels.h"
#include "model/drafter_decode.h"
#include "model/target_decode.h"

namespace dflash {

class ProfileLog;

struct SpecDecoderOptions {
  int64_t max_len = 0;         // the recorded capacity: the longest prompt + max_new_tokens
  int64_t prefill_chunk = 64;  // prompt positions per prefill program
  bool graphs = true;          // record the programs (false: run every pass eagerly)
  bool draft_logits = false;   // keep the first round's draft logits (tests)
  int32_t rollback_bias = 0;   // test hook: roll the target's cache back to start + a + 1 + bias
  // Sampling (z-lab's dflash_generate with temperature > 0): temperature 0 is greedy. Sampled
  // rounds draw the drafts from the drafter's distribution and accept them by speculative
  // rejection sampling, so the output follows the target's own sampling distribution.
  float temperature = 0;
  float top_p = 1;             // (0, 1]
  int64_t top_k = 0;           // 0: no cut
  bool accept_all_drafts = false;  // test hook: skip the rejection test (a wrong sampler)
  ProfileLog* profile = nullptr;  // labels the recorded programs' kernel calls (dflash-bench profile --spec)
};

struct SpecRound {
  int64_t start = 0;            // the block's first position
  std::vector<int32_t> draft;   // the drafted tokens: bs - 1, or L - 1 in a shortened last block of L
  int64_t accepted = 0;         // a + 1
  // The tokens the round put into the output (the reference's count): a + 1, but at most the
  // budget left after the bonus (n + max_new - start - 1), and cut after a stop token.
  int64_t produced = 0;
};

struct Decoded {
  std::vector<int32_t> output;      // prompt + new tokens, cut at max_new and after the first stop
  std::vector<SpecRound> rounds;    // with the drafter: one per verify pass
  std::vector<float> margins;       // target alone: its top-2 logit margin at each new token
  std::vector<float> logits;        // target alone: the chosen token's logit at each new token
  std::vector<float> first_logits;  // with draft_logits: the first round's drafter logits [bs, V]
  double prefill_s = 0, decode_s = 0;  // wall time of the prefill, and of everything after it
  int64_t passes = 0;               // target passes after the prefill (verify passes or steps)
};

class SpecDecoder {
 public:
  // target and drafter (null: the target alone) stay owned by the caller and outlive this; their
  // weights may live in another context of the same device. The decoder has its own context
  // (stream, arena, caches); its programs are recorded here when options.graphs.
  SpecDecoder(Device device, const Target& target, const Drafter* drafter, const SpecDecoderOptions& options);
  ~SpecDecoder();
  SpecDecoder(const SpecDecoder&) = delete;
  SpecDecoder& operator=(const SpecDecoder&) = delete;

  // Greedy decoding of one prompt: with the drafter (speculative) or by the target alone. As z-lab's
  // dflash_generate: rounds run while start + 1 < n + max_new and nothing is stopped (a prefill
  // token that is a stop id ends decoding before any round), and the last block is shortened to
  // the budget left (L = n + max_new - start < bs: the drafter sees an L-token block). Bad
  // input (an empty prompt, ids outside the vocabulary, more than max_len positions) is refused
  // with a message that names it.
  // sample_key: the prompt's random stream when sampling (ignored when greedy).
  Decoded decode(const std::vector<int32_t>& prompt, int64_t max_new, const std::vector<int32_t>& stop_ids,
                 bool with_drafter, uint64_t sample_key = 0);
  bool sampled() const { return opt_.temperature > 0; }

  // Timing (dflash-bench spec): set_position puts the next block at `position` over whatever the
  // caches hold (one pending context row, as after a round with a = 0); the replays run the
  // programs of one round (drafter block + verify with its rollback), of the drafter's block
  // alone, or of one target-alone step, and wait for the device (replay_step: unless told not to,
  // so that steps can be queued back to back).
  void set_position(int64_t position);
  void replay_round();
  void replay_draft();
  void replay_step(bool wait = true);

  int64_t block_size() const;
  const SpecDecoderOptions& options() const { return opt_; }
  Context& context() { return *ctx_; }
  const Engine* engine() const { return engine_.get(); }

 private:
  void prefill_body() const;
  void draft_body(int64_t length) const;
  void verify_body() const;
  void step_body() const;
  template <class Body>
  void run(const Program* program, const Body& body);
  kernels::cpu::SamplingParams sampling() const;
  Tensor field(int f) const;

  SpecDecoderOptions opt_;
  const Target& target_;
  const Drafter* drafter_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<TargetDecoder> target_dec_;
  std::unique_ptr<DrafterDecoder> drafter_dec_;
  StaticIO prefill_io_, draft_io_, verify_io_, step_io_;
  Tensor state_, chunk_ids_, chunk_ctl_, block_, pending_features_;
  Tensor prefill_result_, round_result_, step_result_, draft_logits_;
  Tensor draft_probs_;  // sampling: the drafter's probabilities of the last block [bs, V]
  std::unique_ptr<Engine> engine_;
  const Program *prefill_ = nullptr, *draft_ = nullptr, *verify_ = nullptr, *step_ = nullptr;
  std::vector<const Program*> short_drafts_;  // [L] for L = 2 .. bs-1: the shortened last blocks' drafts
};

// The reference's count of one round: of the round's committed tokens (its accepted drafts, then
// the bonus), how many enter the output: all, but at most `budget` (n + max_new - start - 1), and
// none after the first stop id. *stopped tells whether a stop id was among those.
int64_t round_produced(const std::vector<int32_t>& committed, int64_t budget, const std::vector<int32_t>& stop_ids,
                       bool* stopped);

// Checks one prompt for decode: non-empty, ids in [0, vocab), prompt + max_new within max_len
// (the recorded capacity) and within the target's max_position_embeddings (when known).
// `where` names the prompt in the message (e.g. "prompts.jsonl line 3").
void check_decode_prompt(const std::vector<int32_t>& prompt, int64_t max_new, int64_t vocab, int64_t max_len,
                         int64_t max_positions, const std::string& where);

}  // namespace dflash

// Batched decoding by the target alone from recorded programs (`dflash-train generate`):
// continuous batching over S fixed slots of a KV cache sized at construction. Two programs are
// recorded once, the decode step (one row per slot, a padding row for a free slot) and a prefill
// chunk (P rows packed from the prompts entering slots, each row with its slot and position);
// decoding only replays them. The host keeps a mirror of the device's slot state, writes it when a
// slot takes a request or finishes, and reads one token per slot after each replay. Greedy, or
// sampled (temperature, top_p, top_k) with random numbers drawn inside the programs from each
// request's stream (kernels/cpu/decode_kernels.h's sampling_uniform_at at the position of the
// token drawn), so a request's tokens depend neither on its slot nor on the other requests.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "graphs/engine.h"
#include "graphs/static_io.h"
#include "kernels/cpu/decode_kernels.h"
#include "model/target_slots.h"

namespace dflash {

class ProfileLog;

struct GenerateOptions {
  int64_t slots = 1;           // S: requests decoded at once
  int64_t capacity = 0;        // positions per slot: at least a request's prompt + max_new
  int64_t prefill_chunk = 64;  // P: prompt rows per prefill program
  bool graphs = true;          // record the programs (false: run every pass eagerly)
  bool gemm_tuning = false;    // CUDA, with graphs: time cuBLASLt's algorithms per GEMM shape before recording
  float temperature = 0;       // 0: greedy
  float top_p = 1;             // (0, 1]
  int64_t top_k = 0;           // 0: no cut
  // Test hooks (empty and false in real use): the order in which free slots are taken, and a
  // wrong sampler that keeps the whole distribution whatever top_p says.
  std::vector<int64_t> slot_order;
  bool ignore_top_p = false;
  ProfileLog* profile = nullptr;  // labels the recorded programs' kernel calls
};

struct GenerateRequest {
  std::vector<int32_t> prompt;  // non-empty, ids in [0, vocab)
  int64_t max_new = 1;          // >= 1; prompt + max_new <= capacity
  uint64_t key = 0;             // the request's random stream (sampling)
};

struct GenerateResult {
  size_t request = 0;           // index into the requests given to run()
  std::vector<int32_t> output;  // the new tokens, ended by a stop id or max_new
  bool stopped = false;         // ended by a stop id (the last token)
  int64_t slot = 0;             // the slot that decoded it
};

class BatchGenerator {
 public:
  // target stays owned by the caller and outlives this; its weights may live in another context
  // of the same device. The generator has its own context (stream, arena, slot caches); its
  // programs are recorded here when options.graphs, within `available_bytes` of arena.
  BatchGenerator(Device device, const Target& target, const GenerateOptions& options, size_t available_bytes);
  ~BatchGenerator();
  BatchGenerator(const BatchGenerator&) = delete;
  BatchGenerator& operator=(const BatchGenerator&) = delete;

  // Decodes every request, S at a time; a slot that finishes takes the next request (in order).
  // done(result) is called as each request finishes (in completion order), step(tokens) after
  // every decode step with the tokens it produced. Requests are checked first: a bad one is
  // refused with check_generate_request's message before anything runs.
  void run(const std::vector<GenerateRequest>& requests, const std::vector<int32_t>& stop_ids,
           const std::function<void(const GenerateResult&)>& done,
           const std::function<void(int64_t)>& step = {});

  const GenerateOptions& options() const { return opt_; }
  bool sampled() const { return opt_.temperature > 0; }
  const Engine* engine() const { return engine_.get(); }
  Context& context() const { return *ctx_; }  // the stream and arena the programs replay on
  // Replays the decode step once over whatever the slots hold (timing: dflash-bench).
  void replay_step(bool wait = true);
  // Marks every slot active at `length` with token 0, for timing the decode step alone.
  void fill_slots_for_timing(int64_t length);

 private:
  void prefill_body() const;
  void step_body() const;
  Tensor choose(const Tensor& logits, const Tensor& entry_slot, const Tensor& entry_pos) const;
  void write_state();
  // Prefills the prompts of the given (slot, request) pairs in packed chunks; returns each
  // slot's first token in the order given.
  std::vector<int32_t> prefill(const std::vector<std::pair<int64_t, const GenerateRequest*>>& entering);

  GenerateOptions opt_;
  const Target& target_;
  std::unique_ptr<Context> ctx_;
  std::unique_ptr<SlotTargetDecoder> dec_;
  StaticIO prefill_io_, step_io_;
  Tensor state_, slot_iota_, chunk_ids_, chunk_slot_, chunk_pos_, chunk_ends_, prefill_result_, step_result_;
  std::vector<int32_t> host_state_;  // the mirror of state_
  std::unique_ptr<Engine> engine_;
  const Program *prefill_ = nullptr, *step_ = nullptr;
};

// Checks one request: a non-empty prompt, ids in [0, vocab), max_new >= 1, prompt + max_new within
// the target's max_position_embeddings (when known) and within the slots' capacity. `where` names
// the request in the message (e.g. "prompts.jsonl:3").
void check_generate_request(const std::vector<int32_t>& prompt, int64_t max_new, int64_t vocab, int64_t capacity,
                            int64_t max_positions, const std::string& where);

}  // namespace dflash

// Shared pieces of dflash-bench's commands: random fills, docs/BENCH.md's shapes and docs/MODEL.md's FLOP
// counts, and the random target at real dims that the target and online benchmarks use.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "graphs/buckets.h"
#include "graphs/checkpoint.h"
#include "model/drafter_spec.h"
#include "model/target.h"
#include "runtime/context.h"
#include "runtime/profile.h"

namespace dflash {

// The drafters of docs/BENCH.md, "The configurations" ("small", "qwen3-8b") and a CI-sized one ("tiny").
DrafterSpec bench_spec(const std::string& model);
// N(0, std^2) values, one random block tiled over the tensor (fast for 10^9 elements; never zeros).
void fill_random(const Tensor& t, uint64_t seed, float std);
// Sorted distinct anchors for every sequence of the batch (all kept), seeded.
std::vector<int32_t> random_anchors(const Bucket& b, int64_t bs, uint64_t seed);

// The target the drafter's dims imply (Qwen3: hidden and vocab from the drafter; Qwen3-8B's
// intermediate, 36 layers, 32/8 heads of 128 when the hidden size is 4096).
TargetSpec bench_target_spec(const DrafterSpec& drafter);

// A frozen target of `spec` on the current context with random bf16/f32 weights (norms 1).
std::unique_ptr<Target> make_bench_target(const TargetSpec& spec, const std::vector<int64_t>& layer_ids,
                                          int64_t max_seq_len);

// FLOP of a target forward over B x S tokens through `layers` decoder layers, as the anchor
// counts them (2 x parameters x tokens) plus the causal attention (2 x 2 x S(S+1)/2 x hd x nh).
double target_forward_flops(const TargetSpec& spec, int64_t B, int64_t S, int64_t layers);

// The profiler's measuring part (apps/bench_profile.cpp): CUPTI graph-node tracking must start
// before recording; profile_replays times `replay` (which launches `programs`) and prints the
// table; false when CUPTI missed kernels or the kernels do not account for the replay.
// replay_waits: `replay` waits for the device itself (a decode round), so its replays cannot be
// submitted ahead of a held stream and are timed with the host's part between them.
void profile_track_graph_nodes();
bool profile_replays(Context& ctx, ProfileLog& log, bool cuda, const std::vector<std::string>& programs,
                     const std::function<void()>& replay, int replays, double visible_pairs, const std::string& title,
                     const std::string& summary_json, bool replay_waits = false);

// What the drafter benchmarks trade memory for: checkpointing off; or fitted to the arena, which
// may grow to arena_gb GiB when > 0 so fewer layers recompute (runtime.arena_gb); or, for
// measurements, a forced choice (--recompute=F+P: F layers recomputed entirely, P in part),
// whatever the memory. chunk_rows: the lm_head's rows per chunk (training.chunk_rows).
struct BenchMemory {
  bool on = true;
  double arena_gb = 0;
  std::optional<Recompute> recompute;
  int64_t chunk_rows = 1024;
  bool gemm_tuning = false;  // --gemm-tuning: time cuBLASLt's candidates per GEMM shape at startup
  std::string str() const;  // "off", "on, 4+1p forced", "on, fitted to ..."
};
int bench_drafter_step(const std::string& model, const std::vector<Bucket>& buckets, int steps, bool cuda,
                       const BenchMemory& ck, bool online);
int bench_drafter_profile(const std::string& model, const std::vector<Bucket>& buckets, int replays, bool cuda,
                          const BenchMemory& ck, bool online);
// dflash-bench gemms (apps/bench_gemms.cpp): each distinct GEMM of a recorded program (from its
// profile log) timed with cuBLAS's own algorithm and with cuBLASLt's first `candidates`.
std::vector<std::pair<GemmShape, int64_t>> gemm_shapes_of(const ProfileLog& log, const std::string& program);
int time_gemm_shapes(Context& ctx, const std::vector<std::pair<GemmShape, int64_t>>& shapes, int reps, int candidates,
                     const std::string& title);
int bench_drafter_gemms(const std::string& model, const std::vector<Bucket>& buckets, int reps, int candidates,
                        bool cuda, const BenchMemory& ck, bool online);
struct AttentionBenchShape {
  int64_t batch, seq, anchors, heads, kv_heads, head_dim;
};
int bench_attention(const std::vector<AttentionBenchShape>& shapes, int reps);
int bench_causal_attention(int argc, char** argv);  // apps/bench_attention_target.cpp
int bench_multi(const std::vector<std::string>& args);  // apps/bench_multi.cpp
int bench_spec(const std::string& model, const std::vector<int64_t>& contexts, int reps, bool cuda,
               bool profile = false);  // bench_spec.cpp
int bench_target(const std::string& model, const std::vector<int64_t>& seqs, int steps, bool cuda,
                 bool profile = false);
// dflash-bench generate (apps/bench_generate.cpp): batched decoding's step at each batch and cache length;
// with profile (`dflash-bench profile --generate`), the per-op table of that step instead.
int bench_generate(const std::string& model, const std::vector<int64_t>& batches, const std::vector<int64_t>& contexts,
                   int steps, bool cuda, bool profile = false, bool gemm_tuning = false);

}  // namespace dflash

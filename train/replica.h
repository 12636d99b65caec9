// One worker's replica: its context, the frozen target, the drafter, the optimizer, the
// per-bucket programs (target forward in online mode, train, eval) and the update program.
// Recorded at startup (runtime.graphs = true) and then only replayed, or run eagerly.
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graphs/engine.h"
#include "graphs/overlap.h"
#include "graphs/update.h"
#include "train/bucket_step.h"
#include "train/config.h"

namespace dflash {

class Target;

struct ReplicaOptions {
  Device device;
  int rank = 0;
  Communicator* comm = nullptr;
  DrafterSpec spec;
  std::filesystem::path target_dir;
  std::vector<Bucket> buckets;
  bool online = true;     // run the target inside the step (else hidden states are staged)
  bool train = true;      // record train + update programs
  bool eval = true;       // record eval programs
  bool features = false;  // record target programs without training (dflash-train hidden)
  bool graphs = true;
  bool checkpointing = true;
  bool gemm_tuning = false;  // time cuBLASLt's algorithms per GEMM shape in build() (CUDA)
  size_t arena_budget = 0;   // bytes the arena may grow to so that fewer layers recompute (0: smallest)
  int64_t grad_accum = 1;
  ShardLayout layout;        // world and rank of this replica's parameters; sharded: ZeRO-1
  size_t record_bytes = 0;   // the step record the update program gathers from every rank
  bool overlap = false;      // CUDA, several ranks: reduce gradient buckets during the last backward
  bool reduce_bf16 = false;  // ... in bf16
  int64_t chunk_rows = 1024;
  uint64_t init_seed = 0;
  double init_std = 0.02;
  OptimizerConfig optimizer;
};

class Replica {
 public:
  explicit Replica(const ReplicaOptions& options);
  ~Replica();

  // Plans, checks the memory, records and seals (graphs mode); nothing in eager mode.
  void build(size_t available_bytes, const std::function<void(const std::string&)>& progress = {});

  // One program each (replay, or the eager body); they return when the device is done.
  void run_target(size_t bucket);
  // last: the step's last micro-batch (with overlap, its program reduces the gradients).
  void run_train(size_t bucket, bool last = true);
  void run_eval(size_t bucket);
  void run_update();

  Context& context() { return ctx_; }
  const ReplicaOptions& options() const { return opt_; }
  Drafter& drafter() { return *drafter_; }
  const Target& target() const { return *target_; }
  AdamWOptimizer& optimizer() { return *optimizer_; }
  BucketStep& step(size_t bucket) { return *steps_[bucket]; }
  BucketStep& eval_step(size_t bucket) { return eval_steps_.empty() ? *steps_[bucket] : *eval_steps_[bucket]; }
  UpdateStep& update() { return *update_; }
  const Engine* engine() const { return engine_.get(); }
  bool overlapped() const { return overlap_ != nullptr; }

 private:
  template <class Body>
  void run(const Program* program, const Body& eager_body);
  struct Programs {
    const Program *target = nullptr, *train = nullptr, *train_last = nullptr, *eval = nullptr;
  };
  ReplicaOptions opt_;
  Context ctx_;
  std::unique_ptr<Target> target_;
  std::unique_ptr<Drafter> drafter_;
  std::unique_ptr<AdamWOptimizer> optimizer_;
  std::vector<std::unique_ptr<BucketStep>> steps_;
  std::vector<std::unique_ptr<BucketStep>> eval_steps_;  // offline mode: eval still runs the target
  std::unique_ptr<UpdateStep> update_;
  std::unique_ptr<OverlappedReduction> overlap_;
  std::unique_ptr<Engine> engine_;
  std::vector<Programs> programs_;  // per bucket, resolved once after build (no lookups on replay)
  const Program* update_program_ = nullptr;
};

}  // namespace dflash

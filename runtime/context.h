// The per-worker execution context: one device, its stream, its allocators (heap, arena,
// persistent), the autograd tape and the mode (eager, plan, record) that decides what a kernel
// call does. Each worker thread owns one; ops find it through Context::current().
#pragma once
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/gemm_tuning.h"
#include "runtime/placement.h"
#include "runtime/profile.h"

namespace dflash {

class Tape;
class FreshLeafGrads;

// eager: kernel calls run now and temporaries come from the heap.
// plan: kernel calls are dropped and temporaries are only placed, to find a program's peak.
// record: kernel calls are recorded (CPU: appended as closures; CUDA: stream capture) and
//         temporaries land in the arena at the offsets the planning pass found.
enum class Mode { eager, plan, record };

using KernelCall = std::function<void()>;

// What a finished planning or recording pass produced.
struct RecordingResult {
  size_t kernels = 0;             // kernel calls recorded (or that would have been)
  size_t peak_bytes = 0;          // arena bytes the program needs
  std::string peak_at;            // the op (and phase) whose allocation reached the peak
  size_t live_bytes = 0;          // the most bytes live at once; peak_bytes - live_bytes is fragmentation
  // Plan pass: the offline placement of its temporaries when it needs fewer bytes than peak_bytes
  // (the online best fit), else null. A recording given it needs placement->arena_bytes.
  std::shared_ptr<const Placement> placement;
  void* cuda_graph_exec = nullptr;  // CUDA record pass: the instantiated graph (owned by the caller)
};

class Context {
 public:
  explicit Context(Device device, int rank = 0);
  ~Context();
  Context(const Context&) = delete;
  Context& operator=(const Context&) = delete;

  // The context of the calling thread; set with ContextScope.
  static Context& current();
  static Context* current_or_null();

  Device device() const { return device_; }
  int rank() const { return rank_; }
  Mode mode() const { return mode_; }
  bool recording() const { return mode_ != Mode::eager; }
  bool sealed() const { return sealed_; }
  const std::string& program() const { return program_; }

  // Memory. Temporaries go to the heap in eager mode and to the arena while planning or
  // recording; persistent blocks (parameters, gradients, optimizer state, static inputs and
  // outputs) never live in the arena. host = true gives host memory (pinned on a CUDA device).
  std::shared_ptr<Storage> allocate_temporary(size_t bytes);
  std::shared_ptr<Storage> allocate_persistent(size_t bytes, bool host = false);
  void reserve_arena(size_t bytes);
  size_t arena_bytes() const { return arena_capacity_; }
  void* arena_base() const { return arena_; }  // tests poison the arena between replays
  size_t persistent_bytes() const { return persistent_bytes_; }

  // Kernel submission. CPU: eager runs the call now, record appends it, plan drops it.
  void launch(KernelCall call);
  // CUDA: the stream to launch on, or nullptr while planning (then launch nothing).
  void* cuda_stream_for_launch();
  // Inside a SkipLaunches scope ops build their outputs and tape nodes but submit no kernel, in
  // every mode alike (eager, plan, record), so plans, recordings and eager runs stay the same.
  bool skipping_launches() const { return skip_launches_ > 0; }
  void* cuda_stream() const { return cuda_stream_; }
  void* cublas() const { return cublas_; }
  void* cublas_workspace() const { return cublas_workspace_; }
  size_t cublas_workspace_bytes() const { return cublas_workspace_bytes_; }
  // The cuDNN attention's per-context state (handle, per-shape plans and their workspaces), made on
  // first use outside capture by runtime/cuda/cudnn_attention.cpp; released with the context, after
  // its stream drains and before the stream is destroyed. Its device bytes count as persistent.
  std::shared_ptr<void>& cudnn_attention_state() { return cudnn_attention_; }
  void add_persistent_bytes(size_t bytes) { persistent_bytes_ += bytes; }
  // GEMM algorithms (runtime/gemm_tuning.h): with tuning on, planning notes every GEMM shape
  // (planned_gemms) and graphs/Engine times cuBLASLt's candidates for them before recording; every
  // launch of a shape in the table, eager or recorded, uses its choice.
  void set_gemm_tuning(bool on) { gemm_tuning_ = on; }
  bool gemm_tuning() const { return gemm_tuning_; }
  GemmTable& gemm_table() { return gemm_table_; }
  const std::vector<GemmKey>& planned_gemms() const { return planned_gemms_; }
  void note_gemm(const GemmKey& k) {
    if (gemm_tuning_ && mode_ == Mode::plan && std::find(planned_gemms_.begin(), planned_gemms_.end(), k) == planned_gemms_.end())
      planned_gemms_.push_back(k);
  }

  // Planning and recording, used by graphs/Program. cpu_sink receives a CPU recording. A recording
  // given a placement (from the planning pass of the same body) puts its temporaries at its offsets.
  void begin(Mode mode, const std::string& program, std::vector<KernelCall>* cpu_sink = nullptr,
             std::shared_ptr<const Placement> placement = nullptr);
  RecordingResult end();
  // Leave a failed recording so the context is usable again; its results are discarded.
  void abort_recording() noexcept;

  // After startup: any arena allocation, recording or capture is refused.
  void seal() { sealed_ = true; }

  // Profiling: with a log attached, every kernel call recorded from now on is labelled (op,
  // phase, the cost noted just before it); CPU recordings also time each call when replayed.
  void attach_profile(ProfileLog* log) { profile_ = log; }
  ProfileLog* profile_log() const { return profile_; }
  void set_pending_cost(CallCost c) { pending_cost_ = std::move(c); }

  // Waits for all submitted device work (no-op on the CPU).
  void synchronize();

  // Autograd state.
  Tape& tape() { return *tape_; }
  Tape* swap_tape(Tape* t) {
    Tape* old = tape_;
    tape_ = t;
    return old;
  }
  bool grad_enabled() const { return grad_enabled_; }
  void set_grad_enabled(bool on) { grad_enabled_ = on; }
  // The FreshLeafGrads scope in force (runtime/autograd.h), or null: leaves' gradients accumulate.
  FreshLeafGrads* fresh_leaf_grads() const { return fresh_leaf_grads_; }
  FreshLeafGrads* swap_fresh_leaf_grads(FreshLeafGrads* f) {
    FreshLeafGrads* old = fresh_leaf_grads_;
    fresh_leaf_grads_ = f;
    return old;
  }

  // The op being run, for error messages.
  const char* op() const { return op_ ? op_ : "(no op)"; }
  const char* swap_op(const char* op) {
    const char* old = op_;
    op_ = op;
    return old;
  }

 private:
  friend class ContextScope;
  friend class SkipLaunches;
  [[noreturn]] void refuse_sealed(const char* what, size_t bytes) const;

  Device device_;
  int rank_;
  Mode mode_ = Mode::eager;
  bool sealed_ = false;
  std::string program_;
  std::vector<KernelCall>* sink_ = nullptr;
  size_t kernels_ = 0;
  int skip_launches_ = 0;

  OffsetPlanner planner_;
  std::string peak_at_;
  size_t max_live_bytes_ = 0;
  std::string live_peak_at_;  // plan pass: the op (phase) whose allocation reached max_live_bytes_
  std::vector<ArenaBlock> blocks_;  // plan pass: every temporary's size and lifetime
  uint64_t events_ = 0;             // plan pass: allocations and releases so far
  std::shared_ptr<const Placement> placement_;  // record pass: the offsets to use, or null
  size_t placed_ = 0;                           // record pass: temporaries placed so far
  size_t placed_top_ = 0;                       // record pass: the highest offset + bytes used
  uint64_t epoch_ = 0;  // bumps at each begin(); blocks of an earlier pass are never returned twice
  void* arena_ = nullptr;
  size_t arena_capacity_ = 0;
  size_t persistent_bytes_ = 0;

  std::unique_ptr<Tape> own_tape_;
  Tape* tape_ = nullptr;
  bool grad_enabled_ = true;
  FreshLeafGrads* fresh_leaf_grads_ = nullptr;
  bool gemm_tuning_ = false;
  GemmTable gemm_table_;
  std::vector<GemmKey> planned_gemms_;
  const char* op_ = nullptr;

  ProfileLog* profile_ = nullptr;
  CallCost pending_cost_;
  // Labels the kernel call being submitted in a recording (profiling only).
  int64_t profile_call();

  void* cuda_stream_ = nullptr;
  void* cublas_ = nullptr;
  void* cublas_workspace_ = nullptr;
  size_t cublas_workspace_bytes_ = 0;
  std::shared_ptr<void> cudnn_attention_;
};

// Makes a context current on this thread for the scope's lifetime.
class ContextScope {
 public:
  explicit ContextScope(Context& ctx);
  ~ContextScope();

 private:
  Context* previous_;
};

// Names the running op in error messages for the scope's lifetime.
class OpScope {
 public:
  explicit OpScope(const char* op) : ctx_(Context::current()), previous_(ctx_.swap_op(op)) {}
  ~OpScope() { ctx_.swap_op(previous_); }

 private:
  Context& ctx_;
  const char* previous_;
};

// Ops run in this scope (when `skip` is true) launch no kernel: for values that nothing reads,
// such as the tail of a recomputed checkpoint segment whose backward rules read neither that
// tail's outputs nor anything it alone computes. Their outputs get no memory (null data) until
// something gives them storage (adopt_kept_values); reading one is a bug.
class SkipLaunches {
 public:
  explicit SkipLaunches(bool skip) : ctx_(Context::current()), skip_(skip) { ctx_.skip_launches_ += skip ? 1 : 0; }
  ~SkipLaunches() { ctx_.skip_launches_ -= skip_ ? 1 : 0; }
  SkipLaunches(const SkipLaunches&) = delete;
  SkipLaunches& operator=(const SkipLaunches&) = delete;

 private:
  Context& ctx_;
  bool skip_;
};

}  // namespace dflash

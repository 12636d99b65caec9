// A Program is one recorded step (forward, loss, backward; or the update) over fixed addresses.
// CPU: the ordered kernel calls; CUDA: an instantiated CUDA Graph. replay() is all a worker does.
#pragma once
#include <functional>
#include <string>
#include <vector>

#include "runtime/context.h"

namespace dflash {

class Program {
 public:
  Program() = default;
  ~Program();
  Program(Program&& o) noexcept;
  Program& operator=(Program&& o) noexcept;
  Program(const Program&) = delete;
  Program& operator=(const Program&) = delete;

  const std::string& name() const { return name_; }
  size_t kernels() const { return kernels_; }
  size_t arena_bytes() const { return arena_bytes_; }
  double record_ms() const { return record_ms_; }
  bool valid() const { return ctx_ != nullptr; }

  // Runs the recorded kernel calls in order. CPU: on the calling thread, synchronously.
  // CUDA: launches the graph on the context's stream (asynchronous; synchronize to read).
  void replay() const;

 private:
  friend Program record_program(Context&, const std::string&, const std::function<void()>&,
                                std::shared_ptr<const Placement>);
  Context* ctx_ = nullptr;
  std::string name_;
  std::vector<KernelCall> calls_;
  void* graph_exec_ = nullptr;
  size_t kernels_ = 0;
  size_t arena_bytes_ = 0;
  double record_ms_ = 0;
};

// The arena bytes and kernel count a program body needs, found without running a kernel or
// touching memory (Mode::plan).
struct PlanResult {
  size_t arena_bytes = 0;
  size_t kernels = 0;
  std::string peak_at;  // the op (phase) whose allocation set the peak
  size_t live_bytes = 0;  // the most bytes live at once (arena_bytes - live_bytes: fragmentation)
  // arena_bytes is what the online best fit needs (a recording given no placement); the offline
  // placement, when it packs tighter, needs needed_bytes() with its peak at needed_peak_at().
  std::shared_ptr<const Placement> placement;
  size_t needed_bytes() const { return placement ? placement->arena_bytes : arena_bytes; }
  const std::string& needed_peak_at() const { return placement ? placement->peak_at : peak_at; }
};
PlanResult plan_program(Context& ctx, const std::string& name, const std::function<void()>& body);

// Records the body over the context's arena (reserve_arena first, with at least the planned
// bytes: needed_bytes() when given the plan's placement, else arena_bytes). The body must run the
// same op sequence as when it was planned.
Program record_program(Context& ctx, const std::string& name, const std::function<void()>& body,
                       std::shared_ptr<const Placement> placement = nullptr);

}  // namespace dflash

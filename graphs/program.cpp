// Planning and recording passes over one context, and replay.
#include "graphs/program.h"

#include <chrono>

#include "runtime/autograd.h"
#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

Program::~Program() {
#ifdef DFLASH_CUDA
  if (graph_exec_) cuda_backend::graph_destroy(graph_exec_);
#endif
}

Program::Program(Program&& o) noexcept { *this = std::move(o); }

Program& Program::operator=(Program&& o) noexcept {
  if (this == &o) return *this;
#ifdef DFLASH_CUDA
  if (graph_exec_) cuda_backend::graph_destroy(graph_exec_);
#endif
  ctx_ = o.ctx_;
  name_ = std::move(o.name_);
  calls_ = std::move(o.calls_);
  graph_exec_ = o.graph_exec_;
  kernels_ = o.kernels_;
  arena_bytes_ = o.arena_bytes_;
  record_ms_ = o.record_ms_;
  o.ctx_ = nullptr;
  o.graph_exec_ = nullptr;
  return *this;
}

void Program::replay() const {
  DF_CHECK(ctx_, "replay of an empty program (it was never recorded)");
  if (ctx_->device().is_cpu()) {
    for (const KernelCall& call : calls_) call();
    return;
  }
#ifdef DFLASH_CUDA
  cuda_backend::graph_launch(graph_exec_, ctx_->cuda_stream());
#endif
}

namespace {
// Runs body between begin and end; on any error the context leaves recording cleanly.
RecordingResult run_pass(Context& ctx, Mode mode, const std::string& name, std::vector<KernelCall>* sink,
                         const std::function<void()>& body, std::shared_ptr<const Placement> placement = nullptr) {
  ctx.begin(mode, name, sink, std::move(placement));
  try {
    body();
    DF_CHECK(ctx.tape().size() == 0,
             "program '" << name << "' ended with " << ctx.tape().size()
                         << " autograd node(s) still on the tape: a training step must call backward, "
                            "and an eval step must run under NoGrad");
  } catch (...) {
    ctx.abort_recording();
    throw;
  }
  return ctx.end();
}
}  // namespace

PlanResult plan_program(Context& ctx, const std::string& name, const std::function<void()>& body) {
  RecordingResult r = run_pass(ctx, Mode::plan, name, nullptr, body);
  return {r.peak_bytes, r.kernels, r.peak_at, r.live_bytes, r.placement};
}

Program record_program(Context& ctx, const std::string& name, const std::function<void()>& body,
                       std::shared_ptr<const Placement> placement) {
  auto t0 = std::chrono::steady_clock::now();
  Program p;
  RecordingResult r = run_pass(ctx, Mode::record, name, &p.calls_, body, std::move(placement));
  p.ctx_ = &ctx;
  p.name_ = name;
  p.graph_exec_ = r.cuda_graph_exec;
  p.kernels_ = r.kernels;
  p.arena_bytes_ = r.peak_bytes;
  p.record_ms_ = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return p;
}

}  // namespace dflash

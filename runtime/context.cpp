// Context: modes, allocation routing, kernel submission and the recording lifecycle.
#include "runtime/context.h"

#include <algorithm>
#include <chrono>

#include "runtime/autograd.h"
#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace {
thread_local Context* t_current = nullptr;
constexpr size_t kCublasWorkspaceBytes = 32u << 20;

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::eager: return "eager";
    case Mode::plan: return "plan";
    case Mode::record: return "record";
  }
  return "?";
}
}  // namespace

#ifdef DFLASH_CUDA
void* cuda_raw_alloc(int index, size_t bytes) { return cuda_backend::alloc(index, bytes); }
void cuda_raw_free(int index, void* p) { cuda_backend::free(index, p); }
void* raw_alloc_pinned(size_t bytes) {
  count_alloc_host();
  return cuda_backend::alloc_pinned(bytes);
}
void raw_free_pinned(void* p) { cuda_backend::free_pinned(p); }
#endif

Context::Context(Device device, int rank) : device_(device), rank_(rank) {
  own_tape_ = std::make_unique<Tape>();
  tape_ = own_tape_.get();
  if (device.is_cuda()) {
#ifdef DFLASH_CUDA
    // Before any CUDA call that would name only the runtime's error (without a driver:
    // "cudaErrorInsufficientDriver", which suggests an upgrade instead of a GPU host).
    const int visible = cuda_backend::device_count();
    DF_CHECK(device.index >= 0 && device.index < visible,
             "Context on " << device.str() << ": "
                           << (visible == 0 ? std::string("no CUDA device is visible (no GPU, or no driver)")
                                            : "only " + std::to_string(visible) + " CUDA device(s) are visible (cuda:0..cuda:" +
                                                  std::to_string(visible - 1) + ")")
                           << "; run on a GPU host, or on the CPU (runtime.devices = \"cpu\"; dflash-bench without --cuda)");
    cuda_backend::set_device(device.index);
    cuda_stream_ = cuda_backend::create_stream(device.index);
    cublas_workspace_bytes_ = kCublasWorkspaceBytes;
    cublas_workspace_ = raw_alloc(device, cublas_workspace_bytes_);
    persistent_bytes_ += cublas_workspace_bytes_;
    cublas_ = cuda_backend::create_cublas(cuda_stream_, cublas_workspace_, cublas_workspace_bytes_);
#else
    DF_FAIL("Context on " << device.str() << ": this build has no CUDA backend; "
                          << "rebuild on a host where nvcc is found, or set runtime.devices = \"cpu\"");
#endif
  }
}

Context::~Context() {
  // Nodes left on the tape (a backward that threw) hold temporaries: free them while the stream
  // and allocators still exist.
  own_tape_.reset();
  tape_ = nullptr;
#ifdef DFLASH_CUDA
  if (device_.is_cuda()) {
    cuda_backend::set_device(device_.index);
    cuda_backend::synchronize(cuda_stream_);
    cudnn_attention_.reset();
    if (cublas_) cuda_backend::destroy_cublas(cublas_);
    raw_free(device_, cublas_workspace_);
    raw_free(device_, arena_);
    cuda_backend::destroy_stream(cuda_stream_);
    return;
  }
#endif
  raw_free(device_, arena_);
}

Context& Context::current() {
  DF_CHECK(t_current, "no runtime context on this thread: create a dflash::Context and hold a "
                      "ContextScope for it before running ops");
  return *t_current;
}
Context* Context::current_or_null() { return t_current; }

ContextScope::ContextScope(Context& ctx) : previous_(t_current) {
  t_current = &ctx;
#ifdef DFLASH_CUDA
  if (ctx.device().is_cuda()) cuda_backend::set_device(ctx.device().index);
#endif
}
ContextScope::~ContextScope() { t_current = previous_; }

void Context::refuse_sealed(const char* what, size_t bytes) const {
  DF_FAIL(what << " of " << bytes << " bytes by op '" << op() << "' on " << device_.str()
               << " after the runtime was sealed: buckets are fixed at startup and workers only replay. "
               << "Add the shape you need as a [[buckets]] entry in the config and restart.");
}

std::shared_ptr<Storage> Context::allocate_temporary(size_t bytes) {
  auto s = std::make_shared<Storage>();
  s->bytes = bytes;
  s->device = device_;
  // The outputs of ops that launch nothing are never read (SkipLaunches): they get no memory and
  // no arena block (data stays null), so they cannot raise a plan's peak.
  const bool unread = skip_launches_ > 0;
  if (unread) {
    if (sealed_) refuse_sealed("allocation", bytes);
    s->in_arena = mode_ != Mode::eager;
    return s;
  }
  if (mode_ == Mode::eager) {
    if (sealed_) refuse_sealed("allocation", bytes);
    if (device_.is_cpu()) {
      s->data = raw_alloc(device_, bytes);
      s->release = [](Storage& st) { raw_free(st.device, st.data); };
    } else {
#ifdef DFLASH_CUDA
      count_alloc_device();
      void* stream = cuda_stream_;
      s->data = cuda_backend::alloc_async(align_up(bytes ? bytes : 1), stream);
      s->release = [stream](Storage& st) { cuda_backend::free_async(st.data, stream); };
#endif
    }
    return s;
  }
  if (sealed_) refuse_sealed("arena allocation", bytes);
  const size_t aligned = align_up(bytes ? bytes : 1);
  const size_t peak_before = planner_.peak();
  // The online best fit always runs: it tracks what is live, and places the temporaries of a
  // recording given no placement.
  const size_t online = planner_.allocate(bytes);
  size_t offset = online;
  if (mode_ == Mode::plan && planner_.peak() > peak_before) peak_at_ = std::string(op()) + " (" + current_phase() + ")";
  if (planner_.live_bytes() > max_live_bytes_) {
    max_live_bytes_ = planner_.live_bytes();
    if (mode_ == Mode::plan) live_peak_at_ = std::string(op()) + " (" + current_phase() + ")";
  }
  size_t block = SIZE_MAX;
  if (mode_ == Mode::plan) {
    block = blocks_.size();
    blocks_.push_back({aligned, events_++, UINT64_MAX});
  }
  if (mode_ == Mode::record && placement_) {
    DF_CHECK(placed_ < placement_->offsets.size() && placement_->bytes[placed_] == aligned,
             "recording '" << program_ << "': temporary #" << placed_ << " (op '" << op() << "', " << aligned
                           << " bytes) is not the planning pass's ("
                           << (placed_ < placement_->bytes.size() ? std::to_string(placement_->bytes[placed_]) + " bytes"
                                                                 : std::string("it had only ") +
                                                                       std::to_string(placement_->bytes.size()))
                           << "); the planning pass and the recording pass diverged (a runtime bug: model code "
                              "must not branch on data or timing while recording)");
    offset = placement_->offsets[placed_++];
    placed_top_ = std::max(placed_top_, offset + aligned);
  }
  if (mode_ == Mode::record) {
    DF_CHECK(offset + aligned <= arena_capacity_,
             "recording '" << program_ << "': op '" << op() << "' needs arena bytes up to "
                           << offset + bytes << " but the arena holds " << arena_capacity_
                           << "; the planning pass and the recording pass diverged (a runtime bug: "
                              "model code must not branch on data or timing while recording)");
    s->data = static_cast<char*>(arena_) + offset;
  } else {
    // Planning: a placeholder address that is never dereferenced, with the right alignment.
    s->data = reinterpret_cast<void*>(uintptr_t(kAlignment) + offset);
  }
  s->in_arena = true;
  uint64_t epoch = epoch_;
  s->release = [this, online, aligned, epoch, block](Storage&) {
    if (epoch_ != epoch) return;
    planner_.release(online, aligned);
    if (block != SIZE_MAX) blocks_[block].end = events_++;
  };
  return s;
}

std::shared_ptr<Storage> Context::allocate_persistent(size_t bytes, bool host) {
  if (sealed_) refuse_sealed("persistent allocation", bytes);
  DF_CHECK(mode_ == Mode::eager,
           "op '" << op() << "' asked for a persistent buffer of " << bytes << " bytes while recording '"
                  << program_ << "': create parameters, optimizer state and static inputs/outputs "
                  << "before recording, and only use them inside it");
  auto s = std::make_shared<Storage>();
  s->bytes = bytes;
  if (host && device_.is_cuda()) {
    s->device = Device::cpu();
    s->data = raw_alloc_pinned(bytes);
    s->release = [](Storage& st) { raw_free_pinned(st.data); };
  } else {
    s->device = host ? Device::cpu() : device_;
    s->data = raw_alloc(s->device, bytes);
    s->release = [](Storage& st) { raw_free(st.device, st.data); };
  }
  persistent_bytes_ += align_up(bytes ? bytes : 1);
  return s;
}

void Context::reserve_arena(size_t bytes) {
  DF_CHECK(!sealed_, "reserve_arena after seal: buckets are fixed at startup");
  DF_CHECK(mode_ == Mode::eager, "reserve_arena while recording '" << program_ << "'");
  bytes = align_up(bytes);
  if (bytes <= arena_capacity_) return;
#ifdef DFLASH_CUDA
  if (device_.is_cuda()) cuda_backend::synchronize(cuda_stream_);
#endif
  raw_free(device_, arena_);
  arena_ = nullptr;
  arena_capacity_ = 0;
  arena_ = raw_alloc(device_, bytes);
  arena_capacity_ = bytes;
}

int64_t Context::profile_call() {
  CallCost cost = std::move(pending_cost_);
  pending_cost_ = CallCost{};
  if (!profile_ || mode_ != Mode::record) return -1;
  return profile_->add_call(program_, op(), current_phase(), std::move(cost));
}

void Context::launch(KernelCall call) {
  DF_CHECK(device_.is_cpu(), "op '" << op() << "' submitted a CPU kernel call to " << device_.str()
                                    << " (a runtime bug: the op must dispatch on the device)");
  if (skip_launches_ > 0) {
    pending_cost_ = CallCost{};
    return;
  }
  const int64_t labelled = profile_call();
  switch (mode_) {
    case Mode::eager:
      call();
      break;
    case Mode::plan:
      ++kernels_;
      break;
    case Mode::record:
      ++kernels_;
      if (labelled >= 0) {
        ProfileLog* log = profile_;
        call = [log, labelled, inner = std::move(call)] {
          auto t0 = std::chrono::steady_clock::now();
          inner();
          ProfiledCall& c = log->calls()[size_t(labelled)];
          c.cpu_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
          c.cpu_runs += 1;
        };
      }
      sink_->push_back(std::move(call));
      break;
  }
}

void* Context::cuda_stream_for_launch() {
  DF_CHECK(device_.is_cuda(), "op '" << op() << "' asked for a CUDA stream on " << device_.str()
                                     << " (a runtime bug: the op must dispatch on the device)");
  if (skip_launches_ > 0) {
    pending_cost_ = CallCost{};
    return nullptr;
  }
  profile_call();
  if (mode_ != Mode::eager) ++kernels_;
  return mode_ == Mode::plan ? nullptr : cuda_stream_;
}

void Context::begin(Mode mode, const std::string& program, std::vector<KernelCall>* cpu_sink,
                    std::shared_ptr<const Placement> placement) {
  if (sealed_)
    DF_FAIL("recording of program '" << program << "' requested after the runtime was sealed: buckets are "
                                     << "fixed at startup; add a [[buckets]] entry to the config and restart");
  DF_CHECK(mode_ == Mode::eager, "begin(" << mode_name(mode) << ", '" << program << "') while already in "
                                          << mode_name(mode_) << " mode for '" << program_ << "'");
  DF_CHECK(mode != Mode::eager, "begin: mode must be plan or record");
  DF_CHECK(mode != Mode::record || device_.is_cuda() || cpu_sink,
           "begin(record) on the CPU needs a sink for the kernel calls");
  mode_ = mode;
  program_ = program;
  sink_ = cpu_sink;
  kernels_ = 0;
  ++epoch_;
  planner_.reset();
  peak_at_.clear();
  live_peak_at_.clear();
  max_live_bytes_ = 0;
  blocks_.clear();
  events_ = 0;
  placement_ = mode == Mode::record ? std::move(placement) : nullptr;
  placed_ = placed_top_ = 0;
#ifdef DFLASH_CUDA
  if (mode == Mode::record && device_.is_cuda()) {
    if (profile_) {
      profile_->begin_capture();
      set_capturing_profile_log(profile_);
    }
    cuda_backend::begin_capture(cuda_stream_);
  }
#endif
}

RecordingResult Context::end() {
  DF_CHECK(mode_ != Mode::eager, "end() without begin()");
  RecordingResult r;
  r.kernels = kernels_;
  r.peak_bytes = planner_.peak();
  r.peak_at = peak_at_;
  r.live_bytes = max_live_bytes_;
  const bool placed = mode_ == Mode::record && placement_;
  if (placed) {
    r.peak_bytes = placed_top_;
    r.peak_at = placement_->peak_at;
  }
  if (mode_ == Mode::plan && planner_.live_blocks() == 0) {
    Placement p = place_blocks(blocks_);
    p.peak_at = live_peak_at_;
    if (p.arena_bytes < r.peak_bytes) r.placement = std::make_shared<const Placement>(std::move(p));
  }
  const size_t placed_count = placed_, planned_count = placed ? placement_->offsets.size() : 0;
#ifdef DFLASH_CUDA
  if (mode_ == Mode::record && device_.is_cuda()) {
    if (profile_) profile_->begin_instantiate();
    r.cuda_graph_exec = cuda_backend::end_capture_and_instantiate(cuda_stream_);
    if (profile_) profile_->end_instantiate();
    set_capturing_profile_log(nullptr);
  }
#endif
  size_t live = planner_.live_blocks(), live_bytes = planner_.live_bytes();
  std::string program = program_;
  mode_ = Mode::eager;
  sink_ = nullptr;
  ++epoch_;
  planner_.reset();
  blocks_.clear();
  placement_ = nullptr;
  if (placed && placed_count != planned_count) {
#ifdef DFLASH_CUDA
    if (r.cuda_graph_exec) cuda_backend::graph_destroy(r.cuda_graph_exec);
#endif
    DF_FAIL("program '" << program << "': the recording made " << placed_count << " temporaries but its planning "
                        << "pass " << planned_count << "; the passes diverged (a runtime bug: model code must not "
                        << "branch on data or timing while recording)");
  }
  if (live) {
#ifdef DFLASH_CUDA
    if (r.cuda_graph_exec) cuda_backend::graph_destroy(r.cuda_graph_exec);
#endif
    DF_FAIL("program '" << program << "': " << live << " temporary tensor(s) (" << live_bytes
                        << " bytes) outlived the recording; a program's temporaries must die inside it. "
                        << "Keep results in persistent tensors (static outputs) instead");
  }
  return r;
}

void Context::abort_recording() noexcept {
  if (mode_ == Mode::eager) return;
  if (profile_) profile_->begin_instantiate();
  set_capturing_profile_log(nullptr);
#ifdef DFLASH_CUDA
  if (mode_ == Mode::record && device_.is_cuda()) {
    try {
      void* exec = cuda_backend::end_capture_and_instantiate(cuda_stream_);
      if (exec) cuda_backend::graph_destroy(exec);
    } catch (...) {
    }
  }
#endif
  mode_ = Mode::eager;
  sink_ = nullptr;
  ++epoch_;
  planner_.reset();
  blocks_.clear();
  placement_ = nullptr;
  tape_->clear();
}

void Context::synchronize() {
#ifdef DFLASH_CUDA
  if (device_.is_cuda()) cuda_backend::synchronize(cuda_stream_);
#endif
}

}  // namespace dflash

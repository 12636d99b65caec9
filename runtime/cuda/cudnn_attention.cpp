// cuDNN attention state per context: the handle, the per-shape plans and workspaces, the warm-up
// that proves a plan runs and captures before any recording relies on it, and the stderr notes.
#include "runtime/cuda/cudnn_attention.h"

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <mutex>
#include <sstream>
#include <vector>

#include "runtime/cuda/cuda_backend.h"
#include "runtime/error.h"
#include "runtime/target_attention.h"
#ifdef DFLASH_CUDNN
#include "kernels/cuda/cudnn_sdpa.h"
#endif

namespace dflash::cudnn_attention {

namespace {
std::mutex g_note_mutex;
int g_announced = -1;  // the TargetAttention last announced on stderr

void announce(TargetAttention a) {
  std::lock_guard<std::mutex> lock(g_note_mutex);
  if (g_announced == int(a)) return;
  g_announced = int(a);
  if (a == TargetAttention::cudnn)
    std::fprintf(stderr,
                 "dflash: target causal attention (bf16, CUDA): cuDNN fused flash attention, %s "
                 "(runtime.target_attention = \"own\" selects dflash's kernel)\n",
                 versions().c_str());
  else
    std::fprintf(stderr, "dflash: target causal attention (bf16, CUDA): dflash's own kernel (%s)\n",
                 cudnn_attention_built() ? "runtime.target_attention = \"own\""
                                         : "this build has no cuDNN path; scripts/setup.sh fetches cudnn-frontend");
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

std::string shape_str(const kernels::cuda::CausalAttentionArgs& a) {
  std::ostringstream s;
  s << "B=" << a.B << " S=" << a.S << " heads " << a.nh << "/" << a.nkv << " head_dim " << a.hd;
  return s.str();
}

#ifdef DFLASH_CUDNN
using kernels::cuda::CudnnSdpa;
using kernels::cuda::CudnnSdpaDims;

bool same(const CudnnSdpaDims& x, const CudnnSdpaDims& y) {
  return x.B == y.B && x.S == y.S && x.nh == y.nh && x.nkv == y.nkv && x.hd == y.hd &&
         std::memcmp(&x.scale, &y.scale, sizeof(float)) == 0;
}
CudnnSdpaDims dims_of(const kernels::cuda::CausalAttentionArgs& a) { return {a.B, a.S, a.nh, a.nkv, a.hd, a.scale}; }

struct Plan {
  CudnnSdpaDims dims;
  std::unique_ptr<CudnnSdpa> sdpa;  // null: cuDNN cannot run this shape; dflash's kernel does
  void* workspace = nullptr;        // sdpa->workspace_bytes() on the device; never moves once built
};

struct State {
  int device = 0;
  void* handle = nullptr;
  std::string handle_error;  // cudnnCreate failed: every shape falls back
  std::vector<std::unique_ptr<Plan>> plans;
  ~State() {
    for (auto& p : plans) cuda_backend::free(device, p->workspace);
    plans.clear();
    kernels::cuda::cudnn_destroy(handle);
  }
};

State& state(Context& ctx) {
  std::shared_ptr<void>& slot = ctx.cudnn_attention_state();
  if (!slot) {
    auto* s = new State;
    s->device = ctx.device().index;
    slot = std::shared_ptr<void>(s, [](void* p) { delete static_cast<State*>(p); });
  }
  return *static_cast<State*>(slot.get());
}

Plan* find(State& st, const CudnnSdpaDims& d) {
  for (auto& p : st.plans)
    if (same(p->dims, d)) return p.get();
  return nullptr;
}

// Runs the plan once eagerly and once inside a throw-away capture, on zeroed scratch inputs of the
// shape: empty when both worked, else what failed. Outside capture only.
std::string warm_up(Context& ctx, State& st, const Plan& p) {
  void* stream = ctx.cuda_stream();
  const CudnnSdpaDims& d = p.dims;
  const size_t qbytes = size_t(d.B * d.S * d.nh * d.hd) * 2, kvbytes = size_t(d.B * d.S * d.nkv * d.hd) * 2;
  void* q = cuda_backend::alloc_async(qbytes, stream);
  void* k = cuda_backend::alloc_async(kvbytes, stream);
  void* v = cuda_backend::alloc_async(kvbytes, stream);
  void* o = cuda_backend::alloc_async(qbytes, stream);
  cuda_backend::memset_async(q, 0, qbytes, stream);
  cuda_backend::memset_async(k, 0, kvbytes, stream);
  cuda_backend::memset_async(v, 0, kvbytes, stream);
  std::string why;
  try {
    p.sdpa->forward(st.handle, q, k, v, o, p.workspace, stream);
    cuda_backend::synchronize(stream);
    cuda_backend::begin_capture(stream);
    try {
      p.sdpa->forward(st.handle, q, k, v, o, p.workspace, stream);
    } catch (const std::exception& e) {
      why = std::string("inside a CUDA-graph capture: ") + e.what();
    }
    cuda_backend::graph_destroy(cuda_backend::end_capture_and_instantiate(stream));
  } catch (const std::exception& e) {
    if (why.empty()) why = e.what();
  }
  for (void* b : {q, k, v, o}) cuda_backend::free_async(b, stream);
  cuda_backend::synchronize(stream);
  return why;
}

Plan& build(Context& ctx, State& st, const kernels::cuda::CausalAttentionArgs& a) {
  DF_CHECK(ctx.mode() != Mode::record,
           "causal_attention: cuDNN has no plan yet for " << shape_str(a) << " and program '" << ctx.program()
               << "' is being recorded (a CUDA-graph capture, where plans cannot be built): run the planning pass "
                  "first (plan_program, as graphs/engine.cpp does) or the shape once eagerly, or set "
                  "runtime.target_attention = \"own\"");
  if (!st.handle && st.handle_error.empty()) st.handle = kernels::cuda::cudnn_create(&st.handle_error);
  auto plan = std::make_unique<Plan>();
  plan->dims = dims_of(a);
  std::string why = st.handle_error;
  // cuDNN's default plan, the first its heuristics list that builds (the others: dflash-bench
  // causal-attention --plans times each).
  if (st.handle) plan->sdpa = CudnnSdpa::build(st.handle, plan->dims, &why);
  if (plan->sdpa) {
    const size_t bytes = plan->sdpa->workspace_bytes();
    if (bytes) plan->workspace = cuda_backend::alloc(st.device, bytes);
    why = warm_up(ctx, st, *plan);
    if (why.empty()) {
      ctx.add_persistent_bytes(bytes);
    } else {
      cuda_backend::free(st.device, plan->workspace);
      plan->workspace = nullptr;
      plan->sdpa.reset();
    }
  }
  if (!plan->sdpa) {
    std::lock_guard<std::mutex> lock(g_note_mutex);
    std::fprintf(stderr, "dflash: cuDNN cannot run the target's causal attention for %s (%s); dflash's own kernel "
                 "runs this shape\n", shape_str(a).c_str(), why.c_str());
  }
  st.plans.push_back(std::move(plan));
  return *st.plans.back();
}
#endif
}  // namespace

bool use(Context& ctx, const kernels::cuda::CausalAttentionArgs& a) {
  if (!a.bf16) return false;
  const TargetAttention want = target_attention();
  announce(want);
  if (want != TargetAttention::cudnn) return false;
  if (!aligned16(a.q) || !aligned16(a.k) || !aligned16(a.v) || !aligned16(a.out)) return false;
#ifdef DFLASH_CUDNN
  State& st = state(ctx);
  Plan* p = find(st, dims_of(a));
  if (!p) p = &build(ctx, st, a);
  return p->sdpa != nullptr;
#else
  return false;  // unreachable: target_attention() refuses cudnn in a build without it
#endif
}

void forward(Context& ctx, const kernels::cuda::CausalAttentionArgs& a, void* stream) {
#ifdef DFLASH_CUDNN
  State& st = state(ctx);
  Plan* p = find(st, dims_of(a));
  DF_CHECK(p && p->sdpa, "causal_attention: cuDNN forward for " << shape_str(a)
                             << " without a plan (a runtime bug: the op must ask use() first)");
  try {
    p->sdpa->forward(st.handle, a.q, a.k, a.v, a.out, p->workspace, stream);
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    DF_FAIL(e.what());
  }
#else
  DF_FAIL("causal_attention: cuDNN forward for " << shape_str(a) << " in a build without the cuDNN path (a runtime bug)");
#endif
}

std::string versions() {
#ifdef DFLASH_CUDNN
  return kernels::cuda::cudnn_versions();
#else
  return "this build has no cuDNN path";
#endif
}

}  // namespace dflash::cudnn_attention

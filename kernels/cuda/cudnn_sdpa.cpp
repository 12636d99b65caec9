// The target's causal attention on cuDNN: one cudnn-frontend graph (SDPA forward, bf16 in and out,
// f32 softmax and accumulation, causal band, no stats) per shape, planned with heuristics mode A
// and the first plan that builds, or with the implementation and engine asked for. Kept out of the
// .cu files: the frontend is heavy to compile.
#include "kernels/cuda/cudnn_sdpa.h"

#include <cudnn.h>
#include <cudnn_frontend.h>

#include <stdexcept>
#include <unordered_map>

namespace dflash::kernels::cuda {

namespace fe = cudnn_frontend;

namespace {
// The tensors' ids in the variant pack.
constexpr int64_t kQ = 1, kK = 2, kV = 3, kO = 4;

std::string dims_str(const CudnnSdpaDims& d) {
  return "B=" + std::to_string(d.B) + " S=" + std::to_string(d.S) + " heads " + std::to_string(d.nh) + "/" +
         std::to_string(d.nkv) + " head_dim " + std::to_string(d.hd);
}

// Logical [B, heads, S, hd] over a row-major [B, S, heads, hd] buffer.
fe::graph::Tensor_attributes bshd(const char* name, int64_t uid, const CudnnSdpaDims& d, int64_t heads) {
  return fe::graph::Tensor_attributes()
      .set_name(name)
      .set_uid(uid)
      .set_dim({d.B, heads, d.S, d.hd})
      .set_stride({d.S * heads * d.hd, d.hd, heads * d.hd, 1})
      .set_data_type(fe::DataType_t::BFLOAT16);
}
}  // namespace

struct CudnnSdpa::Impl {
  CudnnSdpaDims dims;
  CudnnSdpaPlanChoice plan;
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

CudnnSdpa::CudnnSdpa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnSdpa::~CudnnSdpa() = default;
const CudnnSdpaDims& CudnnSdpa::dims() const { return impl_->dims; }
size_t CudnnSdpa::workspace_bytes() const { return size_t(impl_->workspace); }
const CudnnSdpaPlanChoice& CudnnSdpa::plan() const { return impl_->plan; }

namespace {
// The shape's operation graph with its heuristics' engine configs listed (not built), on the
// implementation asked for ("" lets the frontend choose). Empty, with the reason, when cuDNN cannot.
std::shared_ptr<fe::graph::Graph> listed_graph(cudnnHandle_t handle, const CudnnSdpaDims& d,
                                               const std::string& implementation,
                                               const std::vector<fe::HeurMode_t>& modes, std::string* why_not) {
  auto g = std::make_shared<fe::graph::Graph>();
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  auto q = g->tensor(bshd("q", kQ, d, d.nh));
  auto k = g->tensor(bshd("k", kK, d, d.nkv));
  auto v = g->tensor(bshd("v", kV, d, d.nkv));
  // Causal: the band's right bound 0 from the top-left diagonal keeps key j <= query i.
  auto options = fe::graph::SDPA_attributes()
                     .set_name("causal_attention")
                     .set_generate_stats(false)
                     .set_diagonal_alignment(fe::DiagonalAlignment_t::TOP_LEFT)
                     .set_diagonal_band_right_bound(0)
                     .set_attn_scale(d.scale);
  if (implementation == "unified") options.set_implementation(fe::AttentionImplementation_t::UNIFIED);
  else if (implementation == "composite") options.set_implementation(fe::AttentionImplementation_t::COMPOSITE);
  std::shared_ptr<fe::graph::Tensor_attributes> o;
  try {
    o = g->sdpa(q, k, v, options)[0];
  } catch (const std::exception& e) {  // the frontend throws when no implementation supports the graph
    if (why_not) *why_not = "sdpa (" + (implementation.empty() ? std::string("auto") : implementation) + ") failed for " +
                            dims_str(d) + ": " + e.what();
    return nullptr;
  }
  o->set_output(true)
      .set_uid(kO)
      .set_dim({d.B, d.nh, d.S, d.hd})
      .set_stride({d.S * d.nh * d.hd, d.hd, d.nh * d.hd, 1})
      .set_data_type(fe::DataType_t::BFLOAT16);
  auto failed = [&](const char* step, fe::error_t e) {
    if (why_not) *why_not = std::string(step) + " failed for " + dims_str(d) + ": " + e.get_message();
    return nullptr;
  };
  if (auto e = g->validate(); e.is_bad()) return failed("validate", e);
  if (auto e = g->build_operation_graph(handle); e.is_bad()) return failed("build_operation_graph", e);
  if (auto e = g->create_execution_plans(modes); e.is_bad()) return failed("create_execution_plans", e);
  if (auto e = g->check_support(handle); e.is_bad()) return failed("check_support", e);
  return g;
}

std::string plan_str(const CudnnSdpaPlanChoice& c) {
  return (c.implementation.empty() ? std::string("auto") : c.implementation) + ":" +
         (c.engine.empty() ? std::string("heuristics") : c.engine);
}
}  // namespace

std::unique_ptr<CudnnSdpa> CudnnSdpa::build(void* cudnn_handle, const CudnnSdpaDims& d, std::string* why_not,
                                            const CudnnSdpaPlanChoice& choice) {
  auto handle = static_cast<cudnnHandle_t>(cudnn_handle);
  const bool by_engine = !choice.engine.empty();
  // The default (no engine named) is mode A's first plan that builds, as before plan choices existed.
  auto g = listed_graph(handle, d, choice.implementation,
                        by_engine ? std::vector<fe::HeurMode_t>{fe::HeurMode_t::A, fe::HeurMode_t::B}
                                  : std::vector<fe::HeurMode_t>{fe::HeurMode_t::A},
                        why_not);
  if (!g) return nullptr;
  auto failed = [&](const char* step, fe::error_t e) {
    if (why_not) *why_not = std::string(step) + " failed for " + dims_str(d) + " (plan " + plan_str(choice) +
                            "): " + e.get_message();
    return nullptr;
  };
  auto impl = std::make_unique<Impl>();
  impl->dims = d;
  impl->plan = choice;
  if (impl->plan.implementation.empty()) impl->plan.implementation = "auto";
  if (by_engine) {
    int64_t index = -1;
    for (int64_t i = 0; i < g->get_execution_plan_count() && index < 0; ++i) {
      std::string name;
      if (g->get_plan_name_at_index(i, name).is_good() && name == choice.engine) index = i;
    }
    if (index < 0) {
      if (why_not) *why_not = "cuDNN lists no plan " + plan_str(choice) + " for " + dims_str(d);
      return nullptr;
    }
    if (auto e = g->build_plan_at_index(index); e.is_bad()) return failed("build_plan_at_index", e);
  } else {
    if (auto e = g->build_plans(fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad()) return failed("build_plans", e);
    if (auto e = g->get_plan_name(impl->plan.engine); e.is_bad()) return failed("get_plan_name", e);
  }
  impl->graph = std::move(g);
  if (auto e = impl->graph->get_workspace_size(impl->workspace); e.is_bad()) return failed("get_workspace_size", e);
  return std::unique_ptr<CudnnSdpa>(new CudnnSdpa(std::move(impl)));
}

std::vector<CudnnSdpaPlanChoice> CudnnSdpa::list_plans(void* cudnn_handle, const CudnnSdpaDims& d, std::string* why) {
  auto handle = static_cast<cudnnHandle_t>(cudnn_handle);
  std::vector<CudnnSdpaPlanChoice> out;
  for (const char* implementation : {"unified", "composite"}) {
    std::string why_not;
    auto g = listed_graph(handle, d, implementation, {fe::HeurMode_t::A, fe::HeurMode_t::B}, &why_not);
    if (!g) {
      if (why) *why += (why->empty() ? "" : "; ") + why_not;
      continue;
    }
    for (int64_t i = 0; i < g->get_execution_plan_count(); ++i) {
      CudnnSdpaPlanChoice c{implementation, ""};
      if (g->get_plan_name_at_index(i, c.engine).is_bad()) continue;
      bool seen = false;
      for (const auto& x : out) seen = seen || (x.implementation == c.implementation && x.engine == c.engine);
      if (!seen) out.push_back(c);
    }
  }
  return out;
}

void CudnnSdpa::forward(void* cudnn_handle, const void* q, const void* k, const void* v, void* out, void* workspace,
                        void* stream) const {
  auto handle = static_cast<cudnnHandle_t>(cudnn_handle);
  cudnnStatus_t st = cudnnSetStream(handle, static_cast<cudaStream_t>(stream));
  if (st != CUDNN_STATUS_SUCCESS)
    throw std::runtime_error(std::string("cudnnSetStream failed: ") + cudnnGetErrorString(st));
  std::unordered_map<int64_t, void*> pack = {
      {kQ, const_cast<void*>(q)}, {kK, const_cast<void*>(k)}, {kV, const_cast<void*>(v)}, {kO, out}};
  if (auto e = impl_->graph->execute(handle, pack, workspace); e.is_bad())
    throw std::runtime_error("cuDNN attention forward failed for " + dims_str(impl_->dims) + ": " + e.get_message());
}

void* cudnn_create(std::string* why_not) {
  cudnnHandle_t h = nullptr;
  cudnnStatus_t st = cudnnCreate(&h);
  if (st != CUDNN_STATUS_SUCCESS) {
    if (why_not) *why_not = std::string("cudnnCreate failed: ") + cudnnGetErrorString(st);
    return nullptr;
  }
  return h;
}

void cudnn_destroy(void* handle) {
  if (handle) cudnnDestroy(static_cast<cudnnHandle_t>(handle));
}

std::string cudnn_versions() {
  auto ver = [](size_t v) {
    return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
  };
  return "cuDNN " + ver(cudnnGetVersion()) + " (headers " + ver(CUDNN_VERSION) + "), cudnn-frontend " +
         std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." + std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

}  // namespace dflash::kernels::cuda

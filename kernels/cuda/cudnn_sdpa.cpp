// The target's causal attention on cuDNN: one cudnn-frontend graph (SDPA forward, bf16 in and out,
// f32 softmax and accumulation, causal band, no stats) per shape, planned with heuristics mode A
// and the first plan that builds. Kept out of the .cu files: the frontend is heavy to compile.
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
  std::shared_ptr<fe::graph::Graph> graph;
  int64_t workspace = 0;
};

CudnnSdpa::CudnnSdpa(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CudnnSdpa::~CudnnSdpa() = default;
const CudnnSdpaDims& CudnnSdpa::dims() const { return impl_->dims; }
size_t CudnnSdpa::workspace_bytes() const { return size_t(impl_->workspace); }

std::unique_ptr<CudnnSdpa> CudnnSdpa::build(void* cudnn_handle, const CudnnSdpaDims& d, std::string* why_not) {
  auto handle = static_cast<cudnnHandle_t>(cudnn_handle);
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
  auto [o, stats] = g->sdpa(q, k, v, options);
  (void)stats;
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
  if (auto e = g->create_execution_plans({fe::HeurMode_t::A}); e.is_bad()) return failed("create_execution_plans", e);
  if (auto e = g->check_support(handle); e.is_bad()) return failed("check_support", e);
  if (auto e = g->build_plans(handle, fe::BuildPlanPolicy_t::HEURISTICS_CHOICE); e.is_bad())
    return failed("build_plans", e);
  auto impl = std::make_unique<Impl>();
  impl->dims = d;
  impl->graph = std::move(g);
  if (auto e = impl->graph->get_workspace_size(impl->workspace); e.is_bad()) return failed("get_workspace_size", e);
  return std::unique_ptr<CudnnSdpa>(new CudnnSdpa(std::move(impl)));
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

// OverlappedReduction: the buckets of half layers, and events between the compute stream and a
// reduction stream recorded into the train program; the bucket all-reduces run on the second stream.
#include "graphs/overlap.h"

#include <algorithm>
#include <string>

#include "runtime/context.h"
#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace {

// Layer l and half of a "layers.<l>.<name>" parameter; l = -1 outside the layers.
std::pair<int64_t, LayerGrads> half_of(const std::string& name) {
  if (name.rfind("layers.", 0) != 0) return {-1, LayerGrads::all};
  const size_t dot = name.find('.', 7);
  const std::string rest = name.substr(dot + 1);
  const bool mlp = rest.rfind("mlp.", 0) == 0 || rest.rfind("post_attention_layernorm.", 0) == 0;
  return {std::stoll(name.substr(7, dot - 7)), mlp ? LayerGrads::mlp : LayerGrads::all};
}

}  // namespace

ReductionPlan reduction_plan_of(const ParameterStore& params, int64_t layers) {
  ReductionPlan plan;
  plan.mlp.assign(size_t(layers), {-1, -1});
  plan.attention.assign(size_t(layers), {-1, -1});
  auto range_of = [&](int64_t l, LayerGrads h) -> FlatRange& {
    return h == LayerGrads::mlp ? plan.mlp[size_t(l)] : plan.attention[size_t(l)];
  };
  for (const ParamSpec& p : params.specs()) {
    const auto [l, h] = half_of(p.name);
    if (l < 0 || l >= layers) continue;
    const int64_t b = params.offset_of(p.name), e = b + p.shape.numel();
    FlatRange& r = range_of(l, h);
    r = r.first < 0 ? FlatRange{b, e} : FlatRange{std::min(r.first, b), std::max(r.second, e)};
  }
  // A bucket reduced early must hold no parameter of another half, whose gradient may still change.
  for (const ParamSpec& p : params.specs()) {
    const auto [l, h] = half_of(p.name);
    const int64_t b = params.offset_of(p.name);
    for (int64_t m = 0; m < layers; ++m)
      for (LayerGrads x : {LayerGrads::mlp, LayerGrads::all}) {
        const FlatRange& r = range_of(m, x);
        DF_CHECK((m == l && x == h) || b < r.first || b >= r.second,
                 "overlap_reduction: parameter '" << p.name << "' lies inside layer " << m << "'s "
                 << (x == LayerGrads::mlp ? "MLP" : "attention") << " bucket; fix: keep each half layer's "
                 << "parameters adjacent in drafter_param_specs (model/drafter_spec.cpp)");
      }
  }
  for (auto* v : {&plan.mlp, &plan.attention})
    for (FlatRange& r : *v)
      if (r.first < 0) r = {0, 0};
  if (layers > 0) plan.attention[0] = {0, 0};  // complete only where the backward ends: in the rest
  std::vector<FlatRange> taken;
  for (auto* v : {&plan.mlp, &plan.attention})
    for (const FlatRange& r : *v)
      if (r.second > r.first) taken.push_back(r);
  std::sort(taken.begin(), taken.end());
  int64_t at = 0;
  for (const FlatRange& r : taken) {
    if (r.first > at) plan.rest.push_back({at, r.first});
    at = std::max(at, r.second);
  }
  if (at < params.padded_numel()) plan.rest.push_back({at, params.padded_numel()});
  return plan;
}

OverlappedReduction::OverlappedReduction(Communicator* comm, int rank, const ParameterStore& params,
                                         ReductionPlan plan, bool bf16)
    : comm_(comm), rank_(rank), params_(params), plan_(std::move(plan)), bf16_(bf16) {
  Context& ctx = Context::current();
  DF_CHECK(ctx.device().is_cuda(), "runtime.overlap_reduction reduces on a second CUDA stream; on "
                                       << ctx.device().str() << " the update reduces the gradients");
  DF_CHECK(comm_ && comm_->world() > 1, "runtime.overlap_reduction needs several ranks");
  int64_t largest = 0;
  for (auto* v : {&plan_.mlp, &plan_.attention, &plan_.rest})
    for (const FlatRange& r : *v) largest = std::max(largest, r.second - r.first);
#ifdef DFLASH_CUDA
  device_ = ctx.device().index;
  stream_ = cuda_backend::create_stream(device_, /*greatest_priority=*/true);
  for (size_t i = 0; i <= 2 * plan_.mlp.size(); ++i) ready_.push_back(cuda_backend::create_event(device_));
  done_ = cuda_backend::create_event(device_);
  if (bf16_) scratch_ = Tensor::persistent({largest}, DType::bf16, "overlap.bf16_bucket");
#else
  (void)largest;
#endif
}

OverlappedReduction::~OverlappedReduction() {
#ifdef DFLASH_CUDA
  for (void* e : ready_) cuda_backend::destroy_event(e);
  if (done_) cuda_backend::destroy_event(done_);
  if (stream_) cuda_backend::destroy_stream(stream_);
#endif
}

void OverlappedReduction::reduce(int64_t begin, int64_t end) {
#ifdef DFLASH_CUDA
  const int64_t n = end - begin;
  if (n <= 0) return;
  float* g = params_.flat_grads().data<float>() + begin;
  if (!bf16_) {
    comm_->all_reduce_sum_on_stream(g, n, rank_, stream_);
    return;
  }
  void* s = scratch_.raw();
  kernels::cuda::convert_f32_to_bf16(g, s, n, stream_);
  comm_->all_reduce_sum_bf16_on_stream(s, n, rank_, stream_);
  kernels::cuda::fill(g, false, n, 0.0f, stream_);
  kernels::cuda::accumulate(g, false, s, true, n, stream_);
#else
  (void)begin;
  (void)end;
#endif
}

void OverlappedReduction::after_layer(int64_t layer, LayerGrads done) {
  if (!armed_ || layer < 0 || layer >= int64_t(plan_.mlp.size())) return;
  const bool mlp = done == LayerGrads::mlp;
  const auto [begin, end] = (mlp ? plan_.mlp : plan_.attention)[size_t(layer)];
  if (end <= begin) return;
  void* main = Context::current().cuda_stream_for_launch();
  if (!main) return;  // planning
#ifdef DFLASH_CUDA
  void* ready = ready_[size_t(2 * layer + (mlp ? 0 : 1))];
  cuda_backend::record_event(ready, main);
  cuda_backend::wait_event(stream_, ready);
  reduce(begin, end);
#endif
}

void OverlappedReduction::finish() {
  if (!armed_) return;
  armed_ = false;
  void* main = Context::current().cuda_stream_for_launch();
  if (!main) return;
#ifdef DFLASH_CUDA
  cuda_backend::record_event(ready_.back(), main);
  cuda_backend::wait_event(stream_, ready_.back());
  for (const auto& [begin, end] : plan_.rest) reduce(begin, end);
  cuda_backend::record_event(done_, stream_);
  cuda_backend::wait_event(main, done_);
#endif
}

}  // namespace dflash

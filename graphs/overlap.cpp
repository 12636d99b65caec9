// OverlappedReduction: events between the compute stream and a reduction stream, recorded into
// the train program; the bucket all-reduces run on the second stream.
#include "graphs/overlap.h"

#include <algorithm>

#include "runtime/context.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

std::vector<std::pair<int64_t, int64_t>> layer_ranges_of(const ParameterStore& params, int64_t layers) {
  std::vector<std::pair<int64_t, int64_t>> out(size_t(layers), {-1, -1});
  for (const ParamSpec& p : params.specs()) {
    if (p.name.rfind("layers.", 0) != 0) continue;
    const int64_t l = std::stoll(p.name.substr(7, p.name.find('.', 7) - 7));
    if (l < 0 || l >= layers) continue;
    const int64_t b = params.offset_of(p.name), e = b + p.shape.numel();
    auto& r = out[size_t(l)];
    r = r.first < 0 ? std::pair{b, e} : std::pair{std::min(r.first, b), std::max(r.second, e)};
  }
  for (auto& r : out)
    if (r.first < 0) r = {0, 0};
  return out;
}

OverlappedReduction::OverlappedReduction(Communicator* comm, int rank, const ParameterStore& params,
                                         std::vector<std::pair<int64_t, int64_t>> layer_ranges, bool bf16)
    : comm_(comm), rank_(rank), params_(params), ranges_(std::move(layer_ranges)), bf16_(bf16) {
  Context& ctx = Context::current();
  DF_CHECK(ctx.device().is_cuda(), "runtime.overlap_reduction reduces on a second CUDA stream; on "
                                       << ctx.device().str() << " the update reduces the gradients");
  DF_CHECK(comm_ && comm_->world() > 1, "runtime.overlap_reduction needs several ranks");
  if (!ranges_.empty()) ranges_[0] = {0, 0};  // layer 0's gradients are complete only at the end
  // The rest: everything outside the layer buckets, in order.
  std::vector<std::pair<int64_t, int64_t>> taken;
  for (const auto& r : ranges_)
    if (r.second > r.first) taken.push_back(r);
  std::sort(taken.begin(), taken.end());
  int64_t at = 0;
  for (const auto& r : taken) {
    if (r.first > at) rest_.push_back({at, r.first});
    at = std::max(at, r.second);
  }
  if (at < params.padded_numel()) rest_.push_back({at, params.padded_numel()});
  int64_t largest = 0;
  for (const auto& r : ranges_) largest = std::max(largest, r.second - r.first);
  for (const auto& r : rest_) largest = std::max(largest, r.second - r.first);
#ifdef DFLASH_CUDA
  device_ = ctx.device().index;
  stream_ = cuda_backend::create_stream(device_);
  for (size_t i = 0; i <= ranges_.size(); ++i) ready_.push_back(cuda_backend::create_event(device_));
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

void OverlappedReduction::after_layer(int64_t layer) {
  if (!armed_ || layer <= 0 || layer >= int64_t(ranges_.size())) return;
  const auto [begin, end] = ranges_[size_t(layer)];
  if (end <= begin) return;
  void* main = Context::current().cuda_stream_for_launch();
  if (!main) return;  // planning
#ifdef DFLASH_CUDA
  cuda_backend::record_event(ready_[size_t(layer)], main);
  cuda_backend::wait_event(stream_, ready_[size_t(layer)]);
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
  for (const auto& [begin, end] : rest_) reduce(begin, end);
  cuda_backend::record_event(done_, stream_);
  cuda_backend::wait_event(main, done_);
#endif
}

}  // namespace dflash

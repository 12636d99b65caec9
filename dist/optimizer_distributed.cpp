// The optimizer step over several ranks (dist/optimizer_distributed.h): gradients reduced
// (all-reduce, or reduce-scatter when the optimizer state is sharded), the global norm summed from
// per-slice sums in rank order, AdamW on this rank's slice or on everything, the compute weights
// all-gathered when sharded.
#include "dist/optimizer_distributed.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cpu/optimizer_slices.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/optimizer_slices.h"
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {
using namespace ops::detail;

DistributedAdamW::DistributedAdamW(AdamWOptimizer& optimizer, int world)
    : optimizer_(optimizer), params_(optimizer.params()) {
  DF_CHECK(world > 1, "the update over ranks needs at least 2 ranks, not " << world);
  slice_sums_ = Tensor::persistent({8 * int64_t(world)}, DType::u8, "optimizer.slice_sums");
}

void DistributedAdamW::update(float grad_scale, const Tensor& stats_out, Communicator* comm, int rank,
                              bool grads_reduced) const {
  OpScope op("adamw");
  check_dtype("adamw", stats_out, DType::f32, "stats_out");
  DF_CHECK(stats_out.numel() == 2, "adamw: stats_out is " << stats_out.describe() << "; it must hold 2 floats");
  const int W = comm ? comm->world() : 1;
  const ShardLayout& layout = params_.layout();
  const bool sharded = params_.sharded();
  DF_CHECK(!sharded || (layout.world == W && layout.rank == rank),
           "adamw: the parameter store is sharded for rank " << layout.rank << " of " << layout.world
                                                              << " but the update runs as rank " << rank << " of " << W);
  DF_CHECK(slice_sums_.numel() == 8 * int64_t(W), "adamw: the update over ranks was built for "
                                                      << slice_sums_.numel() / 8 << " ranks, not " << W);
  const int64_t n = params_.padded_numel();
  // Slice q is [q*s, (q+1)*s) clipped to n; with a store laid out for W ranks, exactly n / W.
  const int64_t s = layout.world == W ? n / W : ((n + W - 1) / W + 15) / 16 * 16;
  auto begin_of = [&](int q) { return std::min(n, int64_t(q) * s); };
  auto len_of = [&](int q) { return std::min(n, int64_t(q + 1) * s) - begin_of(q); };
  const int64_t mine = begin_of(rank), mine_len = len_of(rank);

  if (!grads_reduced) {
    if (sharded) reduce_scatter_(comm, params_.flat_grads(), rank);
    else all_reduce_(comm, params_.flat_grads(), rank);
  }
  float* g = f32(params_.flat_grads());
  float* p = f32(params_.flat_master());  // the slice when sharded
  float *m = f32(optimizer_.adam_m()), *v = f32(optimizer_.adam_v()), *lr = f32(optimizer_.lr_buffer()),
        *norm = f32(optimizer_.norm_buffer()), *stats = f32(stats_out);
  double* sums = static_cast<double*>(slice_sums_.raw());
  int32_t* step = i32(optimizer_.step_counter());
  const OptimizerConfig c = optimizer_.config();
  const bool zero_grads = optimizer_.zero_grads();
  // The span AdamW updates: this rank's slice (sharded) or everything.
  const int64_t at = sharded ? mine : 0, len = sharded ? mine_len : n;

  if (on_cpu()) {
    Context& x = ctx();
    x.launch([=] { kernels::cpu::scale_inplace(g + at, len, grad_scale); });
    if (sharded) {
      x.launch([=] { kernels::cpu::sum_squares(g + mine, mine_len, sums + rank); });
      all_gather_(comm, slice_sums_, rank);
    } else {
      for (int q = 0; q < W; ++q) {
        const int64_t b = begin_of(q), l = len_of(q);
        x.launch([=] { kernels::cpu::sum_squares(g + b, l, sums + q); });
      }
    }
    kernels::cpu::LrSchedule sched{c.lr, c.lr * c.min_lr_ratio, c.warmup_steps, c.total_steps};
    kernels::cpu::AdamW h{c.beta1, c.beta2, c.eps, c.weight_decay};
    x.launch([=] { kernels::cpu::norm_from_slice_sums(sums, W, norm); });
    x.launch([=] { kernels::cpu::clip_by_norm(g + at, len, norm, c.max_grad_norm); });
    x.launch([=] { kernels::cpu::lr_schedule(step, sched, lr); });
    x.launch([=] { kernels::cpu::adamw(p, g + at, m, v, len, step, lr, h); });
    if (sharded) {
      float* compute = f32(params_.flat_compute());
      x.launch([=] { kernels::cpu::copy_bytes(compute + at, p, size_t(len) * sizeof(float)); });
      all_gather_(comm, params_.flat_compute(), rank);
    }
    if (zero_grads) x.launch([=] { kernels::cpu::fill_zero(g, size_t(n) * sizeof(float)); });
    x.launch([=] { kernels::cpu::increment_step(step); });
    x.launch([=] { kernels::cpu::copy_bytes(stats, norm, sizeof(float)); });
    x.launch([=] { kernels::cpu::copy_bytes(stats + 1, lr, sizeof(float)); });
    return;
  }
#ifdef DFLASH_CUDA
  Context& x = ctx();
  float* partials = f32(optimizer_.norm_partials());
  if (sharded) {
    if (void* st = x.cuda_stream_for_launch())
      kernels::cuda::scale_and_sum_squares(g + mine, mine_len, grad_scale, partials, sums + rank, st);
    all_gather_(comm, slice_sums_, rank);
  } else if (void* st = x.cuda_stream_for_launch()) {
    for (int q = 0; q < W; ++q) kernels::cuda::scale_and_sum_squares(g + begin_of(q), len_of(q), grad_scale, partials, sums + q, st);
  }
  if (void* st = x.cuda_stream_for_launch()) {
    kernels::cuda::norm_and_lr(sums, W, norm, step, lr, c.lr, c.lr * c.min_lr_ratio, c.warmup_steps, c.total_steps, st);
    void* bf = static_cast<uint16_t*>(params_.flat_compute().raw()) + at;
    kernels::cuda::SliceAdamW a{p, g + at, m, v, bf, len, step, lr, norm, c.max_grad_norm, c.beta1, c.beta2, c.eps,
                                c.weight_decay};
    kernels::cuda::adamw_slice(a, st);
  }
  if (sharded) all_gather_(comm, params_.flat_compute(), rank);
  if (void* st = x.cuda_stream_for_launch()) {
    if (zero_grads) cuda_backend::memset_async(g, 0, size_t(n) * sizeof(float), st);
    kernels::cuda::finish_update(step, norm, lr, stats, st);
  }
#endif
}

}  // namespace dflash

// ParameterStore layout and the AdamW update's kernel sequence.
#include "runtime/optimizer.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

namespace dflash {
using namespace ops::detail;

ParameterStore::ParameterStore(std::vector<ParamSpec> specs, ShardLayout layout)
    : specs_(std::move(specs)), layout_(layout) {
  OpScope op("parameters");
  DF_CHECK(layout.world >= 1 && layout.rank >= 0 && layout.rank < layout.world,
           "parameters: rank " << layout.rank << " of a world of " << layout.world);
  int64_t total = 0;
  const int64_t align = int64_t(kAlignment / sizeof(float));
  for (size_t i = 0; i < specs_.size(); ++i) {
    DF_CHECK(index_.emplace(specs_[i].name, i).second, "parameter '" << specs_[i].name << "' declared twice");
    offsets_.push_back(total);
    count_ += specs_[i].shape.numel();
    total += (specs_[i].shape.numel() + align - 1) / align * align;
  }
  if (layout.world > 1) {
    const int64_t unit = align * layout.world;
    total = (total + unit - 1) / unit * unit;
  }
  grads_ = Tensor::persistent({total}, DType::f32, "params.grads");
  bool gpu = grads_.device().is_cuda();
  if (layout.sharded) {
    master_ = Tensor::persistent({total / layout.world}, DType::f32, "params.master_shard");
    compute_ = Tensor::persistent({total}, gpu ? DType::bf16 : DType::f32, "params.compute");
  } else {
    master_ = Tensor::persistent({total}, DType::f32, "params.master");
    compute_ = gpu ? Tensor::persistent({total}, DType::bf16, "params.compute") : master_;
  }
  for (size_t i = 0; i < specs_.size(); ++i) {
    size_t off = size_t(offsets_[i]);
    Tensor leaf = view_of(compute_, specs_[i].shape, off * dtype_size(compute_.dtype()));
    leaf.set_name(specs_[i].name);
    leaf.set_requires_grad(true, view_of(grads_, specs_[i].shape, off * sizeof(float)));
    leaves_.push_back(leaf);
  }
}

int64_t ParameterStore::offset_of(const std::string& name) const {
  auto it = index_.find(name);
  DF_CHECK(it != index_.end(), "no parameter named '" << name << "'");
  return offsets_[it->second];
}

void ParameterStore::set_values(const std::string& name, const float* values) {
  const int64_t off = offset_of(name), n = specs_[index_.at(name)].shape.numel();
  if (!layout_.sharded) {
    master(name).copy_from_host(values, size_t(n) * sizeof(float));
    return;
  }
  // This rank's part of the master slice.
  const int64_t begin = std::max(off, shard_begin()), end = std::min(off + n, shard_begin() + shard_numel());
  if (begin < end) {
    Tensor part = view_of(master_, Shape{end - begin}, size_t(begin - shard_begin()) * sizeof(float));
    part.copy_from_host(values + (begin - off), size_t(end - begin) * sizeof(float));
  }
  // The whole compute copy, as the update would round it.
  Tensor dst = view_of(compute_, Shape{n}, size_t(off) * dtype_size(compute_.dtype()));
  if (compute_.dtype() == DType::f32) {
    dst.copy_from_host(values, size_t(n) * sizeof(float));
  } else {
    std::vector<uint16_t> bf(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) bf[size_t(i)] = f32_to_bf16(values[i]);
    dst.copy_from_host(bf.data(), bf.size() * sizeof(uint16_t));
  }
}

const Tensor& ParameterStore::get(const std::string& name) const {
  auto it = index_.find(name);
  DF_CHECK(it != index_.end(), "no parameter named '" << name << "'");
  return leaves_[it->second];
}

Tensor ParameterStore::master(const std::string& name) const {
  DF_CHECK(!layout_.sharded, "parameter '" << name << "': this rank holds only its slice of the f32 master values "
                                           << "(runtime.shard_optimizer = true); read them through a checkpoint");
  auto it = index_.find(name);
  DF_CHECK(it != index_.end(), "no parameter named '" << name << "'");
  Tensor t = view_of(master_, specs_[it->second].shape, size_t(offsets_[it->second]) * sizeof(float));
  t.set_name(name);
  return t;
}

Tensor ParameterStore::grad(const std::string& name) const { return get(name).grad(); }

void ParameterStore::sync_compute_copy() {
  if (compute_.impl().storage == master_.impl().storage) return;
  Context& c = Context::current();
  DF_CHECK(!c.recording(), "sync_compute_copy while recording");
  const int64_t at = layout_.sharded ? shard_begin() : 0;
  const int64_t n = master_.numel();
#ifdef DFLASH_CUDA
  if (compute_.dtype() == DType::bf16) {
    kernels::cuda::convert_f32_to_bf16(master_.raw(), static_cast<uint16_t*>(compute_.raw()) + at, n, c.cuda_stream());
    c.synchronize();
    return;
  }
#endif
  // Sharded on the CPU: this rank's slice of the f32 compute copy.
  std::memcpy(compute_.data<float>() + at, master_.data<float>(), size_t(n) * sizeof(float));
}

AdamWOptimizer::AdamWOptimizer(ParameterStore& params, const OptimizerConfig& config)
    : params_(params), config_(config) {
  int64_t n = params.flat_master().numel();  // this rank's slice when sharded
  m_ = Tensor::persistent({n}, DType::f32, "adam.m");
  v_ = Tensor::persistent({n}, DType::f32, "adam.v");
  step_ = Tensor::persistent({1}, DType::i32, "optimizer.step");
  lr_ = Tensor::persistent({1}, DType::f32, "optimizer.lr");
  norm_ = Tensor::persistent({1}, DType::f32, "optimizer.grad_norm");
  if (norm_.device().is_cuda()) partials_ = Tensor::persistent({1024}, DType::f32, "optimizer.norm_partials");
}

void AdamWOptimizer::update(float grad_scale, const Tensor& stats_out) {
  OpScope op("adamw");
  DF_CHECK(!params_.sharded(), "adamw: a sharded parameter store is updated over its ranks (DistributedAdamW)");
  check_dtype("adamw", stats_out, DType::f32, "stats_out");
  DF_CHECK(stats_out.numel() == 2, "adamw: stats_out is " << stats_out.describe() << "; it must hold 2 floats");
  int64_t n = params_.padded_numel();
  float* p = f32(params_.flat_master());
  float* g = f32(params_.flat_grads());
  float *m = f32(m_), *v = f32(v_), *lr = f32(lr_), *norm = f32(norm_), *stats = f32(stats_out);
  int32_t* step = i32(step_);
  const OptimizerConfig c = config_;
  kernels::cpu::LrSchedule sched{c.lr, c.lr * c.min_lr_ratio, c.warmup_steps, c.total_steps};
  kernels::cpu::AdamW h{c.beta1, c.beta2, c.eps, c.weight_decay};
  // The traffic of the CUDA update: the norm pass reads g (4 bytes an element); AdamW reads g, p, m,
  // v (16) and writes p, m, v (12) and the bf16 compute copy (2); zeroing g writes 4 more.
  note_bytes_cost(double(n) * (34.0 + (zero_grads_ ? 4.0 : 0.0)));
  if (on_cpu()) {
    Context& x = ctx();
    x.launch([=] { kernels::cpu::scale_inplace(g, n, grad_scale); });
    x.launch([=] { kernels::cpu::grad_norm(g, n, norm); });
    x.launch([=] { kernels::cpu::clip_by_norm(g, n, norm, c.max_grad_norm); });
    x.launch([=] { kernels::cpu::lr_schedule(step, sched, lr); });
    x.launch([=] { kernels::cpu::adamw(p, g, m, v, n, step, lr, h); });
    if (zero_grads_) x.launch([=] { kernels::cpu::fill_zero(g, size_t(n) * sizeof(float)); });  // micro-batches add to 0
    x.launch([=] { kernels::cpu::increment_step(step); });
    x.launch([=] { kernels::cpu::copy_bytes(stats, norm, sizeof(float)); });
    x.launch([=] { kernels::cpu::copy_bytes(stats + 1, lr, sizeof(float)); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) {
    void* bf = params_.flat_compute().raw();
    kernels::cuda::OptimizerArgs a{p, g, m, v, bf, n, step, lr, norm, f32(partials_), stats, grad_scale, c.max_grad_norm,
                                   c.lr, c.lr * c.min_lr_ratio, c.warmup_steps, c.total_steps,
                                   c.beta1, c.beta2, c.eps, c.weight_decay, zero_grads_};
    kernels::cuda::optimizer_update(a, s);
  }
#endif
}

}  // namespace dflash

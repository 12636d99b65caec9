// Tensor creation, views, host copies and the shared shape/dtype/device checks.
#include "runtime/tensor.h"

#include <atomic>
#include <cstring>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/profile.h"
#include "kernels/cpu/cpu_kernels.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

uint64_t next_tensor_id() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1, std::memory_order_relaxed);
}

namespace {
Tensor make(std::shared_ptr<Storage> storage, const Shape& shape, DType dtype, const std::string& name) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = std::move(storage);
  impl->shape = shape;
  impl->dtype = dtype;
  impl->id = next_tensor_id();
  impl->name = name;
  return Tensor(std::move(impl));
}

void fill_zero(const Tensor& t) {
  Context& ctx = Context::current();
  OpScope op("zero");
  note_bytes_cost(double(t.nbytes()));
  if (t.device().is_cpu()) {
    void* p = t.raw();
    size_t n = t.nbytes();
    ctx.launch([p, n] { kernels::cpu::fill_zero(p, n); });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* s = ctx.cuda_stream_for_launch()) cuda_backend::memset_async(t.raw(), 0, t.nbytes(), s);
#endif
}

void sync_host_copy(const Tensor& t, void* dst, const void* src, size_t bytes) {
  Context* ctx = Context::current_or_null();
  DF_CHECK(!ctx || !ctx->recording(),
           "host copy of " << t.describe() << " while recording '" << ctx->program()
                           << "': a program reads only its static input buffers; stage host data "
                              "into them before replay");
  if (t.device().is_cpu()) {
    std::memcpy(dst, src, bytes);
    return;
  }
#ifdef DFLASH_CUDA
  if (ctx) ctx->synchronize();
  cuda_backend::memcpy_sync(dst, src, bytes);
#endif
}
}  // namespace

Tensor Tensor::empty(const Shape& shape, DType dtype) {
  Context& ctx = Context::current();
  return make(ctx.allocate_temporary(size_t(shape.numel()) * dtype_size(dtype)), shape, dtype, "");
}

Tensor Tensor::zeros(const Shape& shape, DType dtype) {
  Tensor t = empty(shape, dtype);
  fill_zero(t);
  return t;
}

Tensor Tensor::persistent(const Shape& shape, DType dtype, const std::string& name, bool host) {
  Context& ctx = Context::current();
  size_t bytes = size_t(shape.numel()) * dtype_size(dtype);
  Tensor t = make(ctx.allocate_persistent(bytes, host), shape, dtype, name);
  if (t.device().is_cpu()) {
    std::memset(t.raw(), 0, bytes);
  } else {
#ifdef DFLASH_CUDA
    cuda_backend::memset_async(t.raw(), 0, bytes, ctx.cuda_stream());
    ctx.synchronize();
#endif
  }
  return t;
}

Tensor Tensor::from_host(const Shape& shape, DType dtype, const void* data, const std::string& name) {
  Tensor t = persistent(shape, dtype, name);
  t.copy_from_host(data, t.nbytes());
  return t;
}

Tensor Tensor::from_floats(const Shape& shape, const std::vector<float>& v, const std::string& name) {
  DF_CHECK(int64_t(v.size()) == shape.numel(),
           "from_floats: " << v.size() << " values for shape " << shape.str() << " ('" << name << "')");
  return from_host(shape, DType::f32, v.data(), name);
}

Tensor Tensor::from_ints(const Shape& shape, const std::vector<int32_t>& v, const std::string& name) {
  DF_CHECK(int64_t(v.size()) == shape.numel(),
           "from_ints: " << v.size() << " values for shape " << shape.str() << " ('" << name << "')");
  return from_host(shape, DType::i32, v.data(), name);
}

Tensor& Tensor::set_requires_grad(bool on, Tensor grad) {
  TensorImpl& t = impl();
  DF_CHECK(t.is_leaf, "set_requires_grad on " << describe()
                                              << ", which an op produced; only leaves (parameters, "
                                                 "inputs) are marked trainable");
  t.requires_grad = on;
  if (!on) {
    t.grad.reset();
    return *this;
  }
  if (!grad.defined()) grad = persistent(shape(), DType::f32, name() + ".grad");
  DF_CHECK(grad.shape() == shape() && grad.dtype() == DType::f32 && grad.device() == device(),
           "set_requires_grad on " << describe() << ": the gradient buffer " << grad.describe()
                                   << " must be f32 with the same shape and device");
  t.grad = grad.impl_ptr();
  return *this;
}

void Tensor::copy_from_host(const void* src, size_t bytes) const {
  DF_CHECK(bytes == nbytes(), "copy_from_host into " << describe() << ": " << bytes << " bytes given, "
                                                     << nbytes() << " expected");
  sync_host_copy(*this, raw(), src, bytes);
}

void Tensor::copy_to_host(void* dst, size_t bytes) const {
  DF_CHECK(bytes == nbytes(), "copy_to_host from " << describe() << ": room for " << bytes << " bytes, "
                                                   << nbytes() << " needed");
  DF_CHECK(bytes == 0 || impl().storage->data, "copy_to_host from " << describe() << ": it has no memory (the output "
                                                   "of an op run under SkipLaunches, which nothing may read)");
  sync_host_copy(*this, dst, raw(), bytes);
}

std::vector<float> Tensor::to_floats() const {
  std::vector<float> out(static_cast<size_t>(numel()));
  if (dtype() == DType::f32) {
    copy_to_host(out.data(), nbytes());
  } else if (dtype() == DType::bf16) {
    std::vector<uint16_t> tmp(out.size());
    copy_to_host(tmp.data(), nbytes());
    for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(tmp[i]);
  } else {
    DF_FAIL("to_floats on " << describe() << ": only f32 and bf16 tensors convert to floats; use to_ints");
  }
  return out;
}

std::vector<int32_t> Tensor::to_ints() const {
  std::vector<int32_t> out(static_cast<size_t>(numel()));
  if (dtype() == DType::i32) {
    copy_to_host(out.data(), nbytes());
  } else if (dtype() == DType::u8) {
    std::vector<uint8_t> tmp(out.size());
    copy_to_host(tmp.data(), nbytes());
    for (size_t i = 0; i < out.size(); ++i) out[i] = tmp[i];
  } else {
    DF_FAIL("to_ints on " << describe() << ": only i32 and u8 tensors convert to ints; use to_floats");
  }
  return out;
}

float Tensor::item() const {
  DF_CHECK(numel() == 1, "item() on " << describe() << ": only a one-element tensor has an item");
  return dtype() == DType::f32 || dtype() == DType::bf16 ? to_floats()[0] : float(to_ints()[0]);
}

std::string Tensor::describe() const {
  if (!impl_) return "(undefined tensor)";
  std::string s = std::string(dtype_name(dtype())) + shape().str();
  if (!name().empty()) s += " '" + name() + "'";
  return s;
}

void check_dtype(const char* op, const Tensor& t, DType want, const char* role) {
  DF_CHECK(t.defined(), op << ": " << role << " is undefined");
  DF_CHECK(t.dtype() == want, op << ": " << role << " is " << t.describe() << " but must be "
                                 << dtype_name(want) << "; convert it before the call");
}

void check_same_device(const char* op, const std::vector<const Tensor*>& ts) {
  Device want = Context::current().device();
  for (const Tensor* t : ts) {
    DF_CHECK(t->defined(), op << ": an input is undefined");
    DF_CHECK(t->device() == want, op << ": " << t->describe() << " is on " << t->device().str()
                                     << " but the op runs on " << want.str()
                                     << "; move the tensor to the worker's device first");
  }
}

void check_shape(const char* op, const Tensor& t, const Shape& want, const char* role) {
  DF_CHECK(t.shape() == want, op << ": " << role << " is " << t.describe() << " but must have shape "
                                 << want.str());
}

void check_ndim(const char* op, const Tensor& t, int ndim, const char* role) {
  DF_CHECK(t.ndim() == ndim, op << ": " << role << " is " << t.describe() << " but must be " << ndim << "-D");
}

}  // namespace dflash

// Helpers shared by the op implementations (not part of the public op API).
#pragma once
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace dflash::ops::detail {

inline Context& ctx() { return Context::current(); }
inline bool on_cpu() { return Context::current().device().is_cpu(); }

[[noreturn]] inline void no_cuda_kernel(const char* op) {
  DF_FAIL(op << ": no CUDA kernel for this op yet; run it on the CPU backend (runtime.devices = \"cpu\")");
}

// A view of t's storage with another shape and byte offset; no autograd.
inline Tensor view_of(const Tensor& t, const Shape& shape, size_t extra_offset = 0) {
  auto impl = std::make_shared<TensorImpl>();
  impl->storage = t.impl().storage;
  impl->offset = t.impl().offset + extra_offset;
  impl->shape = shape;
  impl->dtype = t.dtype();
  impl->id = next_tensor_id();
  impl->name = t.name();
  return Tensor(std::move(impl));
}

inline float* f32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }
inline int32_t* i32(const Tensor& t) { return t.defined() ? t.data<int32_t>() : nullptr; }

}  // namespace dflash::ops::detail

// Helpers shared by the op implementations (not part of the public op API).
#pragma once
#include <cstring>

#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#include "runtime/profile.h"
#include "runtime/tensor.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

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

// What a backward rule needs of an input whose values it never reads: identity, shape, dtype and
// gradient flags (a leaf as it is: persistent), without holding the input's storage, so the
// activation is freed as soon as nothing else reads it.
inline Tensor grad_key(const Tensor& t) {
  if (!t.defined() || t.is_leaf()) return t;
  auto impl = std::make_shared<TensorImpl>(t.impl());
  impl->storage.reset();
  return Tensor(std::move(impl));
}

inline float* f32(const Tensor& t) { return t.defined() ? t.data<float>() : nullptr; }

// CUDA kernels take untyped pointers with a bf16 flag per pointer.
inline void* raw(const Tensor& t) { return t.defined() ? t.raw() : nullptr; }
inline bool bf16(const Tensor& t) { return t.defined() && t.dtype() == DType::bf16; }

// A float tensor: f32 on the CPU; f32 or bf16 on CUDA (bf16 for storage, f32 arithmetic).
inline void check_float_dtype(const char* op, const Tensor& t, const char* role) {
  if (on_cpu()) {
    check_dtype(op, t, DType::f32, role);
    return;
  }
  DF_CHECK(t.defined(), op << ": " << role << " is undefined");
  DF_CHECK(t.dtype() == DType::f32 || t.dtype() == DType::bf16,
           op << ": " << role << " is " << t.describe() << " but must be f32 or bf16; convert it before the call");
}
inline int32_t* i32(const Tensor& t) { return t.defined() ? t.data<int32_t>() : nullptr; }

// Profiling: the next kernel call reads `reads` once, writes `writes` once and read-modify-writes
// `updates` (accumulated gradients); undefined tensors count nothing. A no-op unless profiling.
inline void note_io(std::initializer_list<const Tensor*> reads, std::initializer_list<const Tensor*> writes,
                    std::initializer_list<const Tensor*> updates = {}) {
  if (!Context::current().profile_log()) return;
  double bytes = 0;
  for (const Tensor* t : reads) bytes += t->defined() ? double(t->nbytes()) : 0.0;
  for (const Tensor* t : writes) bytes += t->defined() ? double(t->nbytes()) : 0.0;
  for (const Tensor* t : updates) bytes += t->defined() ? 2.0 * double(t->nbytes()) : 0.0;
  note_bytes_cost(bytes);
}

// dst row r [0, width) = src row r [0, width) for r < rows, any dtype: byte offsets and pitches,
// one launch (a memcpy per row on the CPU, strided_copy on CUDA).
inline void copy_rows(const Tensor& src, size_t src_at, size_t src_pitch, const Tensor& dst, size_t dst_at,
                      size_t dst_pitch, size_t width, int64_t rows) {
  const char* s = static_cast<const char*>(src.raw()) + src_at;
  char* d = static_cast<char*>(dst.raw()) + dst_at;
  if (on_cpu()) {
    ctx().launch([=] {
      for (int64_t r = 0; r < rows; ++r) std::memcpy(d + r * dst_pitch, s + r * src_pitch, width);
    });
    return;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::strided_copy(s, src_pitch, d, dst_pitch, width, rows, st);
#endif
}

#ifdef DFLASH_CUDA
// A GEMM of shape `key` on the context's stream (nothing while planning): notes the shape while
// planning with GEMM tuning on, and runs the algorithm the context's GEMM table chose for it
// (cublasGemmEx's own otherwise). make() builds the arguments, with pointers, only when launching.
template <class MakeArgs>
void cuda_gemm(const GemmKey& key, MakeArgs make) {
  Context& c = Context::current();
  c.note_gemm(key);
  if (void* s = c.cuda_stream_for_launch()) {
    kernels::cuda::GemmArgs g = make();
    g.workspace = c.cublas_workspace();  // for cuBLASLt: a chosen algorithm, or a GEMM with an addend
    g.workspace_bytes = c.cublas_workspace_bytes();
    if (const GemmAlgoConfig* chosen = c.gemm_table().find(key); chosen && !is_cublas_default(*chosen))
      g.lt_config = chosen->data();
    kernels::cuda::gemm(g, c.cublas(), s);
  }
}
#endif

}  // namespace dflash::ops::detail

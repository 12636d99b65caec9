// CUDA kernels: launchers over pointers and sizes, each taking the stream (a cudaStream_t passed
// as void*). No autograd, no allocation, no globals. Float math accumulates in f32; tensors are
// f32 or bf16 (flag per pointer). Backward kernels accumulate (+=) into gradients.
#pragma once
#include <cstddef>
#include <cstdint>

namespace dflash::kernels::cuda {

// primitives.cu
void fill(void* p, bool bf16, int64_t n, float value, void* stream);
void accumulate(void* dst, bool dst_bf16, const void* src, bool src_bf16, int64_t n, void* stream);  // dst += src
void copy(void* dst, const void* src, size_t bytes, void* stream);

// gemm.cu: C[M,N] = alpha op(A) op(B) + beta C through cuBLAS, row-major, fp32 accumulation.
// A and B share a dtype (bf16 or f32); C is bf16 or f32.
struct GemmArgs {
  int64_t M, N, K;
  const void* A;
  int64_t lda;
  bool trans_a;
  const void* B;
  int64_t ldb;
  bool trans_b;
  void* C;
  int64_t ldc;
  float alpha, beta;
  bool ab_bf16, c_bf16;
};
void gemm(const GemmArgs& g, void* cublas_handle, void* stream);

// metrics.cu: as kernels/cpu/metrics.cpp (single block, fixed order).
void normalize_weights(const float* w, int64_t n, float eps, float* out, void* stream);
void weighted_accuracy(const int32_t* argmax, const int32_t* labels, const float* w, int64_t n, float eps, float* out,
                       void* stream);

// optimizer.cu: one update over flat buffers (see runtime/optimizer.h): grads *= grad_scale;
// norm (deterministic two-pass reduction through partials[1024]); clip; lr from step; AdamW on the
// f32 master writing the bf16 compute copy; zero grads; step + 1; stats = {norm, lr}.
struct OptimizerArgs {
  float *p, *g, *m, *v;
  void* compute_bf16;  // may be null
  int64_t n;
  int32_t* step;
  float *lr, *norm, *partials, *stats;
  float grad_scale, max_grad_norm, peak_lr, min_lr;
  int64_t warmup_steps, total_steps;
  float beta1, beta2, eps, weight_decay;
};
void optimizer_update(const OptimizerArgs& a, void* stream);
void convert_f32_to_bf16(const void* src, void* dst, int64_t n, void* stream);

}  // namespace dflash::kernels::cuda

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

}  // namespace dflash::kernels::cuda

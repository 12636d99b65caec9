// Fused lm_head + softmax cross-entropy on the GPU, chunked over rows: per chunk a cuBLAS GEMM
// into f32 logits, then one block per row for logsumexp, CE and argmax (forward) or dlogits
// (backward, followed by the dh and dweight GEMMs). Every reduction has a fixed order.
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int32_t kIgnoredLabel = -1;

// Running (max, sum of exp(x - max), index of the first max) over a set of logits.
struct SoftmaxState {
  float m, s;
  int64_t best;
};

// exp-sum s taken at max m, moved to max M >= m. A state whose max is M already keeps s as is
// (this also keeps a NaN sum, and avoids -inf - -inf).
__device__ __forceinline__ float rescale(float m, float s, float M) { return m == M ? s : s * expf(m - M); }

// Commutative, so the butterfly leaves identical bits in every lane; ties take the lower index.
__device__ __forceinline__ SoftmaxState combine(SoftmaxState a, SoftmaxState b) {
  float M = a.m > b.m ? a.m : b.m;
  int64_t best = a.m > b.m ? a.best : b.m > a.m ? b.best : (a.best < b.best ? a.best : b.best);
  return {M, rescale(a.m, a.s, M) + rescale(b.m, b.s, M), best};
}

// logits (c, V) f32; one block per row r of the chunk; lse, ce, argmax (c).
// Each thread scans its elements in increasing index order; a NaN never becomes the max but
// makes the sum NaN. The first maximum wins, and like the CPU scan, a NaN in column 0 (or a row
// where nothing exceeds -inf) gives argmax 0.
template <int N>
__global__ void ce_rows_forward_kernel(const float* logits, const int32_t* labels, int64_t V, float* lse, float* ce,
                                       int32_t* argmax) {
  __shared__ SoftmaxState sh[kWarps];
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  SoftmaxState st{-INFINITY, 0.0f, V};
  for (int64_t j = int64_t(threadIdx.x) * N; j < V; j += int64_t(kThreads) * N) {
    Vec<float, N> v = *reinterpret_cast<const Vec<float, N>*>(x + j);
#pragma unroll
    for (int k = 0; k < N; ++k) {
      const float xv = v.v[k];
      if (xv > st.m) {
        st.s = st.s * expf(st.m - xv) + 1.0f;
        st.m = xv;
        st.best = j + k;
      } else if (xv != -INFINITY) {
        st.s += expf(xv - st.m);
      }
    }
  }
  for (int o = 16; o > 0; o >>= 1) {
    SoftmaxState other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                       __shfl_xor_sync(0xffffffffu, st.best, o)};
    st = combine(st, other);
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = st;
  __syncthreads();
  if (threadIdx.x != 0) return;
  st = sh[0];
  for (int w = 1; w < kWarps; ++w) st = combine(st, sh[w]);
  if (isnan(x[0]) || st.best == V) st.best = 0;
  const float row_lse = st.m + logf(st.s);
  const int32_t label = labels[r];
  lse[r] = row_lse;
  ce[r] = label == kIgnoredLabel ? 0.0f : (label >= 0 && int64_t(label) < V) ? row_lse - x[label] : NAN;
  argmax[r] = int32_t(st.best);
}

// loss[0] = sum over chunks of float(sum_r weights[r] * ce[r]), each chunk's sum in double:
// the CPU's formula, so the loss depends only on the chunk size.
__global__ void ce_loss_kernel(const float* ce, const float* weights, int64_t R, int64_t chunk, float* loss) {
  __shared__ double sh[kWarps];
  float total = 0.0f;
  for (int64_t r0 = 0; r0 < R; r0 += chunk) {
    const int64_t n = chunk < R - r0 ? chunk : R - r0;
    double s = 0.0;
    for (int64_t i = threadIdx.x; i < n; i += kThreads) s += double(weights[r0 + i]) * double(ce[r0 + i]);
    total += float(block_sum<kThreads>(s, sh));
  }
  if (threadIdx.x == 0) loss[0] = total;
}

// logits (c, V) f32 in, dlogits (c, V) of T out (may alias logits when T is float); one block per row.
// dlogits = dloss * weights[r] * (softmax - onehot(label)); exactly 0 for weight 0 or label -1,
// NaN for a label outside [-1, V).
template <class T>
__global__ void ce_rows_backward_kernel(const float* logits, const int32_t* labels, const float* weights,
                                        const float* lse, const float* dloss, int64_t V, T* dlogits) {
  const int64_t r = blockIdx.x;
  const float* x = logits + r * V;
  T* d = dlogits + r * V;
  const int32_t label = labels[r];
  const float w = weights[r];
  if (w == 0.0f || label == kIgnoredLabel) {
    for (int64_t v = threadIdx.x; v < V; v += kThreads) d[v] = from_float<T>(0.0f);
    return;
  }
  if (label < 0 || int64_t(label) >= V) {
    for (int64_t v = threadIdx.x; v < V; v += kThreads) d[v] = from_float<T>(NAN);
    return;
  }
  const float s = dloss[0] * w, row_lse = lse[r];
  for (int64_t v = threadIdx.x; v < V; v += kThreads) {
    float g = s * expf(x[v] - row_lse);
    if (v == label) g -= s;
    d[v] = from_float<T>(g);
  }
}

size_t elem(bool bf16) { return bf16 ? 2 : 4; }
const void* offset(const void* p, int64_t elems, bool bf16) { return static_cast<const char*>(p) + elems * elem(bf16); }
void* offset(void* p, int64_t elems, bool bf16) { return static_cast<char*>(p) + elems * elem(bf16); }
}  // namespace

void linear_ce_forward(const LinearCeForward& a, void* cublas, void* stream) {
  cudaStream_t s = as_stream(stream);
  const bool vec = a.V % 4 == 0 && aligned16(a.logits);
  for (int64_t r0 = 0; r0 < a.R; r0 += a.chunk) {
    const int64_t n = a.chunk < a.R - r0 ? a.chunk : a.R - r0;
    // (n, V) = h[r0:r0+n] (n, H) W^T
    gemm({n, a.V, a.H, offset(a.h, r0 * a.H, a.bf16), a.H, false, a.weight, a.H, true, a.logits, a.V, 1.0f, 0.0f,
          a.bf16, false},
         cublas, stream);
    if (vec)
      ce_rows_forward_kernel<4><<<unsigned(n), kThreads, 0, s>>>(a.logits, a.labels + r0, a.V, a.lse + r0, a.ce + r0,
                                                                 a.argmax + r0);
    else
      ce_rows_forward_kernel<1><<<unsigned(n), kThreads, 0, s>>>(a.logits, a.labels + r0, a.V, a.lse + r0, a.ce + r0,
                                                                 a.argmax + r0);
    check_launch("linear_ce_forward: rows");
  }
  ce_loss_kernel<<<1, kThreads, 0, s>>>(a.ce, a.row_weights, a.R, a.chunk, a.loss);
  check_launch("linear_ce_forward: loss");
}

void linear_ce_backward(const LinearCeBackward& a, void* cublas, void* stream) {
  if (!a.dh && !a.dw) return;
  cudaStream_t s = as_stream(stream);
  for (int64_t r0 = 0; r0 < a.R; r0 += a.chunk) {
    const int64_t n = a.chunk < a.R - r0 ? a.chunk : a.R - r0;
    const void* h = offset(a.h, r0 * a.H, a.bf16);
    gemm({n, a.V, a.H, h, a.H, false, a.weight, a.H, true, a.logits, a.V, 1.0f, 0.0f, a.bf16, false}, cublas, stream);
    if (a.bf16)
      ce_rows_backward_kernel<bf16_t><<<unsigned(n), kThreads, 0, s>>>(
          a.logits, a.labels + r0, a.row_weights + r0, a.lse + r0, a.dloss, a.V, static_cast<bf16_t*>(a.dlogits));
    else
      ce_rows_backward_kernel<float><<<unsigned(n), kThreads, 0, s>>>(
          a.logits, a.labels + r0, a.row_weights + r0, a.lse + r0, a.dloss, a.V, static_cast<float*>(a.dlogits));
    check_launch("linear_ce_backward: rows");
    // dh[r0:r0+n] (n, H) += dlogits (n, V) W (V, H)
    if (a.dh)
      gemm({n, a.H, a.V, a.dlogits, a.V, false, a.weight, a.H, false, offset(a.dh, r0 * a.H, a.dh_bf16), a.H, 1.0f,
            1.0f, a.bf16, a.dh_bf16},
           cublas, stream);
    // dW (V, H) += dlogits^T (V, n) h[r0:r0+n] (n, H)
    if (a.dw)
      gemm({a.V, a.H, n, a.dlogits, a.V, true, h, a.H, false, a.dw, a.H, 1.0f, 1.0f, a.bf16, a.dw_bf16}, cublas, stream);
  }
}

}  // namespace dflash::kernels::cuda

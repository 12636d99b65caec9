// Fused lm_head + softmax cross-entropy on the GPU, chunked over rows: per chunk a cuBLAS GEMM
// into logits of h's dtype (bf16 logits, as PyTorch's lm_head gives, so no f32 round trip), then
// a row kernel for logsumexp, CE and argmax (forward; in training also the unit-upstream dlogits,
// written over the logits) or dlogits (backward when the lm_head needs its gradient, followed by
// the dh and dweight GEMMs). Every reduction is in f32 and has a fixed order. In training the row
// kernel reads the logits once where a cluster of up to 8 CTAs can hold a row in shared memory
// (kernels/heuristics.h, ce_rows: bf16, V a multiple of 8 C, the Hopper kernels), else twice
// (one block a row). It stays bandwidth-bound only if a
// logit costs a few instructions: exp(x - m) is ex2.approx((x - m) * log2e), an FADD, an FMUL and
// an MUFU (x - m as exact as in expf(x - m), so logits near 1e4 lose nothing; relative error about
// 3e-7), and a pack's argmax is looked for only when the pack raises the running maximum.
#include <cmath>
#include <optional>
#include <stdexcept>
#include <string>
#include <type_traits>

#include <cooperative_groups.h>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_traits.h"
#include "kernels/cuda/test_seams.h"

namespace dflash::kernels::cuda {

namespace {
namespace cg = cooperative_groups;
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int32_t kIgnoredLabel = -1;

// Running (max, sum of exp(x - max), index of the first max) over a set of logits.
struct SoftmaxState {
  float m, s;
  int64_t best;
};

constexpr float kLog2e = 1.4426950408889634f;

// exp(x - m) by the SFU (common.cuh's exp2_ftz): exp(-inf) = 0, NaN for NaN.
__device__ __forceinline__ float exp_shifted(float x, float m) { return exp2_ftz(__fmul_rn(__fsub_rn(x, m), kLog2e)); }

// exp-sum s taken at max m, moved to max M >= m. A state whose max is M already keeps s as is
// (this also keeps a NaN sum, and avoids -inf - -inf).
__device__ __forceinline__ float rescale(float m, float s, float M) { return m == M ? s : s * expf(m - M); }

// Commutative, so the butterfly leaves identical bits in every lane; ties take the lower index.
__device__ __forceinline__ SoftmaxState combine(SoftmaxState a, SoftmaxState b) {
  float M = a.m > b.m ? a.m : b.m;
  int64_t best = a.m > b.m ? a.best : b.m > a.m ? b.best : (a.best < b.best ? a.best : b.best);
  return {M, rescale(a.m, a.s, M) + rescale(b.m, b.s, M), best};
}

// A thread's running state after the pack of N logits xs at column j (packs come in increasing
// column order): the pack's first maximum (NaN never is one) moves the running max once, then the
// pack's exps are summed, each independent of the others (a NaN makes the sum NaN, -inf adds nothing).
template <int N>
__device__ __forceinline__ void scan_pack(const float (&xs)[N], int64_t j, SoftmaxState& st) {
  float pack_max = -INFINITY;  // fmaxf skips NaN: a pack of NaN and -inf never raises the max
#pragma unroll
  for (int k = 0; k < N; ++k) pack_max = fmaxf(pack_max, xs[k]);
  if (pack_max > st.m) {  // rare once the row's maximum is met: only here the index is sought
    int pack_best = N - 1;
#pragma unroll
    for (int k = N - 1; k >= 0; --k)
      if (xs[k] == pack_max) pack_best = k;  // the first maximum (+0 and -0 tie, as with >)
    st.s *= expf(st.m - pack_max);  // exp(-inf) = 0 keeps a NaN sum NaN
    st.m = pack_max;
    st.best = j + pack_best;
  }
  // While the max is -inf every logit so far is -inf or NaN: shift by 0 so that -inf adds 0 and
  // NaN adds NaN (a shift by -inf would make -inf - -inf a NaN).
  const float shift = st.m == -INFINITY ? 0.0f : st.m;
  float pack_sum = 0.0f;
#pragma unroll
  for (int k = 0; k < N; ++k) pack_sum += exp_shifted(xs[k], shift);
  st.s += pack_sum;
}

// The block's state, in thread 0: a butterfly in each warp, then the warps in order.
template <int WARPS>
__device__ __forceinline__ SoftmaxState block_state(SoftmaxState st, SoftmaxState (&sh)[WARPS]) {
  for (int o = 16; o > 0; o >>= 1) {
    SoftmaxState other{__shfl_xor_sync(0xffffffffu, st.m, o), __shfl_xor_sync(0xffffffffu, st.s, o),
                       __shfl_xor_sync(0xffffffffu, st.best, o)};
    st = combine(st, other);
  }
  if ((threadIdx.x & 31) == 0) sh[threadIdx.x >> 5] = st;
  __syncthreads();
  if (threadIdx.x == 0) {
    st = sh[0];
    for (int w = 1; w < WARPS; ++w) st = combine(st, sh[w]);
  }
  return st;
}

// The unit-upstream loss gradient of the pack xs at column j, in place: w * softmax - w at the
// label (the caller fills rows of weight 0, label -1 or a bad label itself).
template <int N>
__device__ __forceinline__ void dlogit_pack(float (&xs)[N], int64_t j, float row_lse, float w, int32_t label) {
#pragma unroll
  for (int k = 0; k < N; ++k) xs[k] = w * exp_shifted(xs[k], row_lse);
  const int64_t at = int64_t(label) - j;
  if (at >= 0 && at < N) {
#pragma unroll
    for (int k = 0; k < N; ++k)
      if (k == at) xs[k] -= w;
  }
}

// ce of a row: 0 for label -1, lse - x[label] for a label in [0, V), NaN otherwise.
__device__ __forceinline__ float row_ce(int32_t label, int64_t V, float row_lse, float label_logit) {
  return label == kIgnoredLabel ? 0.0f : (label >= 0 && int64_t(label) < V) ? row_lse - label_logit : NAN;
}
__device__ __forceinline__ bool dlogits_filled(float w, int32_t label, int64_t V) {
  return w == 0.0f || label == kIgnoredLabel || label < 0 || int64_t(label) >= V;
}
__device__ __forceinline__ float dlogits_fill(float w, int32_t label) {
  return (w == 0.0f || label == kIgnoredLabel) ? 0.0f : NAN;
}

// logits (c, V) of T; one block per row r of the chunk; lse, ce, argmax (c).
// Each thread scans its packs of N in increasing index order (scan_pack). The first maximum wins,
// and like the CPU scan, a NaN in column 0 (or a row where nothing exceeds -inf) gives argmax 0.
// With dlogits (training), a second pass writes the loss gradient for a unit upstream gradient,
// exactly as ce_rows_backward_kernel with dloss 1: weights[r] * (softmax - onehot(label)); 0 for
// weight 0 or label -1; NaN for a bad label; one N-wide store per pack. This pass reads the logits
// again; ce_rows_slice_kernel (below) keeps the row on chip instead where its slices fit.
// dlogits may alias logits: every pack is read and then written by the same thread, and the
// row's single reads (x[0], x[label]) come before the barrier that precedes the writes.
template <int N, class T>
__global__ void ce_rows_forward_kernel(const T* logits, const int32_t* labels, const float* weights, int64_t V,
                                       float* lse, float* ce, int32_t* argmax, T* dlogits) {
  __shared__ SoftmaxState sh[kWarps];
  __shared__ float s_lse;
  const int64_t r = blockIdx.x;
  const T* x = logits + r * V;
  SoftmaxState st{-INFINITY, 0.0f, V};
#pragma unroll 4  // several packs' loads in flight
  for (int64_t j = int64_t(threadIdx.x) * N; j < V; j += int64_t(kThreads) * N) {
    const Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(x + j);
    float xs[N];
#pragma unroll
    for (int k = 0; k < N; ++k) xs[k] = to_float(v.v[k]);
    scan_pack(xs, j, st);
  }
  st = block_state(st, sh);
  const int32_t label = labels[r];
  if (threadIdx.x == 0) {
    if (isnan(to_float(x[0])) || st.best == V) st.best = 0;
    const float row_lse = st.m + logf(st.s);
    lse[r] = row_lse;
    ce[r] = row_ce(label, V, row_lse, label >= 0 && int64_t(label) < V ? to_float(x[label]) : 0.0f);
    argmax[r] = int32_t(st.best);
    s_lse = row_lse;
  }
  if (!dlogits) return;
  __syncthreads();
  T* d = dlogits + r * V;
  const float w = weights[r];
  const bool filled = dlogits_filled(w, label, V);
  const float fill = dlogits_fill(w, label);
  const float row_lse = s_lse;
#pragma unroll 4
  for (int64_t j = int64_t(threadIdx.x) * N; j < V; j += int64_t(kThreads) * N) {
    float g[N];
    if (filled) {
#pragma unroll
      for (int k = 0; k < N; ++k) g[k] = fill;
    } else {
      const Vec<T, N> v = *reinterpret_cast<const Vec<T, N>*>(x + j);
#pragma unroll
      for (int k = 0; k < N; ++k) g[k] = to_float(v.v[k]);
      dlogit_pack(g, j, row_lse, w, label);
    }
    Vec<T, N> out;
#pragma unroll
    for (int k = 0; k < N; ++k) out.v[k] = from_float<T>(g[k]);
    *reinterpret_cast<Vec<T, N>*>(d + j) = out;
  }
}

// ---- Training rows read once: a cluster of CTAs holds the row in shared memory ----
// One cluster of C CTAs per row (C in 1..8); CTA c of the cluster owns the columns [c S, (c+1) S),
// S = V / C, a multiple of 8, kept in its shared memory (S bf16: 37984 bytes for the qwen3
// vocabulary at C = 8, so five CTAs share an SM, some loading while others write). Pass one
// loads the slice into shared memory and scans it as the kernel above scans its packs; the CTAs'
// states meet through distributed shared memory and every CTA combines them in rank order (the
// same bits in each); pass two writes dlogits from shared memory. So the logits are read once and
// written once, not read twice. The label's logit and column 0 are read from the shared slices
// before the cluster barrier: after it other CTAs overwrite the logits (dlogits aliases them).
// Other sums than ce_rows_forward_kernel's (the thread-to-pack map differs), the same bits run to run.
constexpr int kSliceThreads = 256;

struct SlicePartial {
  SoftmaxState st;
  float label_logit;  // the label's logit where this slice holds the label
  int first_is_nan;   // rank 0: column 0 is NaN
};

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 900  // cluster barriers: compute capability 9.0 on
__device__ __forceinline__ void cluster_arrive() {
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void cluster_wait() { asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory"); }
#endif

__global__ void __launch_bounds__(kSliceThreads, 5)
    ce_rows_slice_kernel(const bf16_t* logits, const int32_t* labels, const float* weights, int64_t V, int64_t S,
                         float* lse, float* ce, int32_t* argmax, bf16_t* dlogits) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
  __trap();  // no clusters before compute capability 9.0: kernels/heuristics.h's ce_rows never launches it
#else
  extern __shared__ uint4 slice[];  // S / 8 packs of this CTA's columns
  __shared__ SoftmaxState sh[kSliceThreads / 32];
  __shared__ SlicePartial part;
  __shared__ float s_lse;
  cg::cluster_group cluster = cg::this_cluster();
  const unsigned C = cluster.num_blocks(), rank = cluster.block_rank();
  const int64_t r = blockIdx.x / C, col0 = int64_t(rank) * S, packs = S / 8;
  const uint4* x = reinterpret_cast<const uint4*>(logits + r * V + col0);
  SoftmaxState st{-INFINITY, 0.0f, V};
#pragma unroll 4
  for (int64_t p = threadIdx.x; p < packs; p += kSliceThreads) {
    const uint4 u = x[p];
    slice[p] = u;
    float xs[8];
    unpack(RawPack<bf16_t>{u}, xs);
    scan_pack(xs, col0 + 8 * p, st);
  }
  st = block_state(st, sh);  // its barrier also makes the slice visible to thread 0
  const int32_t label = labels[r];
  const bf16_t* held = reinterpret_cast<const bf16_t*>(slice);
  if (threadIdx.x == 0) {
    part.st = st;
    const int64_t at = int64_t(label) - col0;
    part.label_logit = at >= 0 && at < S ? to_float(held[at]) : 0.0f;
    part.first_is_nan = rank == 0 && isnan(to_float(held[0]));
  }
  cluster.sync();  // every CTA's part written
  if (threadIdx.x == 0) {
    const SlicePartial* p0 = cluster.map_shared_rank(&part, 0);
    SoftmaxState t = p0->st;
    for (unsigned c = 1; c < C; ++c) t = combine(t, cluster.map_shared_rank(&part, c)->st);
    const float row_lse = t.m + logf(t.s);
    s_lse = row_lse;
    if (rank == 0) {
      const bool valid = label >= 0 && int64_t(label) < V;
      const unsigned owner = valid ? unsigned(int64_t(label) / S) : 0u;
      const float label_logit = valid ? cluster.map_shared_rank(&part, owner)->label_logit : 0.0f;
      lse[r] = row_lse;
      ce[r] = row_ce(label, V, row_lse, label_logit);
      argmax[r] = int32_t(p0->first_is_nan || t.best == V ? 0 : t.best);
    }
  }
  cluster_arrive();  // this CTA is done reading the others' parts
  __syncthreads();
  uint4* d = reinterpret_cast<uint4*>(dlogits + r * V + col0);
  const float w = weights[r];
  const bool filled = dlogits_filled(w, label, V);
  const float fill = dlogits_fill(w, label), row_lse = s_lse;
#pragma unroll 4
  for (int64_t p = threadIdx.x; p < packs; p += kSliceThreads) {
    float g[8];
    if (filled) {
#pragma unroll
      for (int k = 0; k < 8; ++k) g[k] = fill;
    } else {
      unpack(RawPack<bf16_t>{slice[p]}, g);
      dlogit_pack(g, col0 + 8 * p, row_lse, w, label);
    }
    store_pack(reinterpret_cast<bf16_t*>(d + p), g);
  }
  cluster_wait();  // no CTA leaves while another may still read its part
#endif
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

// logits (c, V) of T in, dlogits (c, V) of T out (may alias logits: each element is read and
// written by one thread); one block per row.
// dlogits = dloss * weights[r] * (softmax - onehot(label)); exactly 0 for weight 0 or label -1,
// NaN for a label outside [-1, V).
template <class T>
__global__ void ce_rows_backward_kernel(const T* logits, const int32_t* labels, const float* weights,
                                        const float* lse, const float* dloss, int64_t V, T* dlogits) {
  const int64_t r = blockIdx.x;
  const T* x = logits + r * V;
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
    float g = s * exp_shifted(to_float(x[v]), row_lse);
    if (v == label) g -= s;
    d[v] = from_float<T>(g);
  }
}

// dst (n) += scale[0] * src (n): the saved unit-upstream gradient times the real upstream one.
__global__ void scaled_accumulate_kernel(void* dst, bool dst_bf16, const void* src, bool src_bf16, const float* scale,
                                         int64_t n) {
  const float k = scale[0];
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(gridDim.x) * blockDim.x)
    accumulate_at(dst, dst_bf16, i, k * load(src, src_bf16, i));
}

size_t elem(bool bf16) { return bf16 ? 2 : 4; }
const void* offset(const void* p, int64_t elems, bool bf16) { return static_cast<const char*>(p) + elems * elem(bf16); }
void* offset(void* p, int64_t elems, bool bf16) { return static_cast<char*>(p) + elems * elem(bf16); }
}  // namespace

int ce_rows_cluster(const void* logits, const void* dlogits, bool bf16, int64_t V) {
  if (!aligned16(logits) || (dlogits && !aligned16(dlogits))) return 0;
  const std::optional<size_t> budget = test_seams().ce_slice_bytes;  // a test's; else the rule's
  return heuristics::ce_rows(device_traits(), V, bf16, dlogits != nullptr, budget.value_or(heuristics::kCeSliceBytes))
      .cluster;
}

void ce_rows_forward(const void* logits, bool bf16, const int32_t* labels, const float* weights, int64_t n, int64_t V,
                     float* lse, float* ce, int32_t* argmax, void* dlogits, void* stream) {
  if (n == 0) return;
  cudaStream_t s = as_stream(stream);
  if (const int C = ce_rows_cluster(logits, dlogits, bf16, V)) {
    const int64_t S = V / C;
    const size_t smem = size_t(S) * sizeof(bf16_t);
    cudaError_t e = cudaFuncSetAttribute(ce_rows_slice_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("ce_rows_forward: cudaFuncSetAttribute failed for ") +
                               std::to_string(smem) + " bytes of shared memory: " + cudaGetErrorString(e));
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(n * C));
    cfg.blockDim = dim3(kSliceThreads);
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cudaLaunchAttribute cluster{};
    cluster.id = cudaLaunchAttributeClusterDimension;
    cluster.val.clusterDim.x = unsigned(C), cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
    cfg.attrs = &cluster;
    cfg.numAttrs = 1;
    e = cudaLaunchKernelEx(&cfg, ce_rows_slice_kernel, static_cast<const bf16_t*>(logits), labels, weights, V, S, lse,
                           ce, argmax, static_cast<bf16_t*>(dlogits));
    if (e != cudaSuccess)
      throw std::runtime_error(std::string("ce_rows_forward: the cluster launch (") + std::to_string(C) +
                               " CTAs a row, " + std::to_string(smem) +
                               " bytes each) failed: " + cudaGetErrorString(e) + "; report the device and V");
    check_launch("ce_rows_forward (row slices)");
    return;
  }
  auto launch = [&](auto n_tag, auto* x) {
    constexpr int N = decltype(n_tag)::value;
    using T = std::remove_const_t<std::remove_pointer_t<decltype(x)>>;
    ce_rows_forward_kernel<N, T>
        <<<unsigned(n), kThreads, 0, s>>>(x, labels, weights, V, lse, ce, argmax, static_cast<T*>(dlogits));
  };
  // 16-byte loads and stores where every row starts aligned.
  const bool packs = aligned16(logits) && (!dlogits || aligned16(dlogits));
  if (bf16) {
    auto* x = static_cast<const bf16_t*>(logits);
    V % 8 == 0 && packs ? launch(std::integral_constant<int, 8>{}, x)
                                    : launch(std::integral_constant<int, 1>{}, x);
  } else {
    auto* x = static_cast<const float*>(logits);
    V % 4 == 0 && packs ? launch(std::integral_constant<int, 4>{}, x)
                                    : launch(std::integral_constant<int, 1>{}, x);
  }
  check_launch("ce_rows_forward");
}

void ce_loss(const float* ce, const float* weights, int64_t R, int64_t chunk, float* loss, void* stream) {
  ce_loss_kernel<<<1, kThreads, 0, as_stream(stream)>>>(ce, weights, R, chunk, loss);
  check_launch("ce_loss");
}

void scaled_accumulate(void* dst, bool dst_bf16, const void* src, bool src_bf16, const float* scale, int64_t n,
                       void* stream) {
  if (n == 0) return;
  scaled_accumulate_kernel<<<blocks_for(n, kThreads), kThreads, 0, as_stream(stream)>>>(dst, dst_bf16, src, src_bf16,
                                                                                       scale, n);
  check_launch("scaled_accumulate");
}

void linear_ce_backward(const LinearCeBackward& a, void* cublas, void* stream) {
  if (!a.dh && !a.dw) return;
  cudaStream_t s = as_stream(stream);
  for (int64_t r0 = 0; r0 < a.R; r0 += a.chunk) {
    const int64_t n = a.chunk < a.R - r0 ? a.chunk : a.R - r0;
    const void* h = offset(a.h, r0 * a.H, a.bf16);
    gemm({n, a.V, a.H, h, a.H, false, a.weight, a.H, true, a.logits, a.V, 1.0f, 0.0f, a.bf16, a.bf16}, cublas, stream);
    if (a.bf16)
      ce_rows_backward_kernel<bf16_t><<<unsigned(n), kThreads, 0, s>>>(
          static_cast<const bf16_t*>(a.logits), a.labels + r0, a.row_weights + r0, a.lse + r0, a.dloss, a.V,
          static_cast<bf16_t*>(a.dlogits));
    else
      ce_rows_backward_kernel<float><<<unsigned(n), kThreads, 0, s>>>(
          static_cast<const float*>(a.logits), a.labels + r0, a.row_weights + r0, a.lse + r0, a.dloss, a.V,
          static_cast<float*>(a.dlogits));
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

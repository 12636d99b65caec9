// SwiGLU on the GPU: y = silu(g) * u, forward (16-byte accesses where aligned; also over one
// buffer holding g and u as the halves of each row) and backward
// (templated on each pointer's dtype, 8-element packs where aligned). The sigmoid never takes exp
// of a positive argument, as on the CPU.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// sigmoid(v) = 1 / (1 + e) for v >= 0, else e / (1 + e), with e = exp(-|v|): one MUFU.EX2 and one
// MUFU.RCP (1 + e is in [1, 2], so the approximate reciprocal is within 1 ulp; e below 2^-126 is
// flushed to 0, where sigmoid(v) < 1e-38) instead of expf and an IEEE division: within 1e-6 of the
// CPU's. Forward and backward alike, so each is a few instructions an element and bandwidth-bound.
__device__ __forceinline__ float fast_sigmoid(float v) {
  const float e = exp2_ftz(-fabsf(v) * 1.44269504088896341f);
  const float r = rcp_approx_ftz(1.0f + e);
  return v >= 0.0f ? r : e * r;
}

struct Swiglu {
  __device__ float operator()(float g, float u) const { return g * fast_sigmoid(g) * u; }
};

// The backward's per-element terms with the rounding of the original scalar kernel pinned by
// intrinsics (what nvcc made of `acc + d * u * s * (1 + g * (1 - s))` and `acc + d * g * s`):
//   dg' = dg + ((d*u)*s) * fma(g, 1-s, 1),  du' = du + (d*g)*s
__device__ __forceinline__ float dgate(float acc, float g, float u, float d, float s) {
  return __fadd_rn(acc, __fmul_rn(__fmul_rn(__fmul_rn(d, u), s), __fmaf_rn(g, __fsub_rn(1.0f, s), 1.0f)));
}
__device__ __forceinline__ float dup(float acc, float g, float d, float s) {
  return __fadd_rn(acc, __fmul_rn(__fmul_rn(d, g), s));
}

// g, u, dy (n); dg, du (n) +=, either may be null, and may be g and u themselves (every element is
// loaded before it is stored); a fresh one starts from 0 instead of its
// contents (the bits of a zero-filled buffer, without the fill). Packs [0, packs), then the rest.
template <class TI, class TD, class TG, class TU>
__global__ void __launch_bounds__(kThreads)
    swiglu_backward_kernel(const TI* g, const TI* u, const TD* dy, TG* dg, TU* du, int64_t n, int64_t packs,
                           bool dg_fresh, bool du_fresh) {
  const int64_t stride = int64_t(gridDim.x) * kThreads, first = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  for (int64_t k = first; k < packs; k += stride) {
    const int64_t e = k * kPack;
    float gv[kPack], uv[kPack], dv[kPack], s[kPack], acc[kPack];
    load_pack(g + e, gv);
    load_pack(u + e, uv);
    load_pack(dy + e, dv);
#pragma unroll
    for (int j = 0; j < kPack; ++j) s[j] = fast_sigmoid(gv[j]);
    if (dg) {
      if (dg_fresh) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) acc[j] = 0.0f;
      } else {
        load_pack(dg + e, acc);
      }
#pragma unroll
      for (int j = 0; j < kPack; ++j) acc[j] = dgate(acc[j], gv[j], uv[j], dv[j], s[j]);
      store_pack(dg + e, acc);
    }
    if (du) {
      if (du_fresh) {
#pragma unroll
        for (int j = 0; j < kPack; ++j) acc[j] = 0.0f;
      } else {
        load_pack(du + e, acc);
      }
#pragma unroll
      for (int j = 0; j < kPack; ++j) acc[j] = dup(acc[j], gv[j], dv[j], s[j]);
      store_pack(du + e, acc);
    }
  }
  for (int64_t i = packs * kPack + first; i < n; i += stride) {
    const float gi = to_float(g[i]), ui = to_float(u[i]), d = to_float(dy[i]), s = fast_sigmoid(gi);
    if (dg) dg[i] = from_float<TG>(dgate(dg_fresh ? 0.0f : to_float(dg[i]), gi, ui, d, s));
    if (du) du[i] = from_float<TU>(dup(du_fresh ? 0.0f : to_float(du[i]), gi, d, s));
  }
}
// gu [rows, 2I] -> y [rows, I]: y[r, j] = Swiglu(gu[r, j], gu[r, I + j]), N elements an access
// (N divides I and every row start is 16-byte aligned when N > 1).
template <class T, int N>
__global__ void __launch_bounds__(kThreads) swiglu_halves_kernel(const T* gu, T* y, int64_t rows, int64_t I) {
  const int64_t per_row = I / N, n = rows * per_row;
  const int64_t stride = int64_t(gridDim.x) * kThreads, first = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  for (int64_t i = first; i < n; i += stride) {
    const int64_t r = i / per_row, j = (i - r * per_row) * N;
    const Vec<T, N> vg = *reinterpret_cast<const Vec<T, N>*>(gu + r * 2 * I + j);
    const Vec<T, N> vu = *reinterpret_cast<const Vec<T, N>*>(gu + r * 2 * I + I + j);
    Vec<T, N> vy;
#pragma unroll
    for (int k = 0; k < N; ++k) vy.v[k] = from_float<T>(Swiglu{}(to_float(vg.v[k]), to_float(vu.v[k])));
    *reinterpret_cast<Vec<T, N>*>(y + r * I + j) = vy;
  }
}

template <class T, int N>
void launch_swiglu_halves(const void* gu, void* y, int64_t rows, int64_t I, cudaStream_t s) {
  constexpr auto kernel = swiglu_halves_kernel<T, N>;
  kernel<<<grid_for<kernel>(rows * (I / N), kThreads), kThreads, 0, s>>>(static_cast<const T*>(gu),
                                                                           static_cast<T*>(y), rows, I);
}
}  // namespace

// g, u, y (n), one dtype.
void swiglu_forward(const void* g, const void* u, void* y, bool bf16, int64_t n, void* stream) {
  launch_map(g, u, y, bf16, n, Swiglu{}, stream, "swiglu_forward");
}

void swiglu_halves_forward(const void* gu, void* y, bool bf16, int64_t rows, int64_t I, void* stream) {
  if (rows == 0 || I == 0) return;
  cudaStream_t s = as_stream(stream);
  const int N = bf16 ? 8 : 4;  // elements in 16 bytes
  if (aligned16(gu) && aligned16(y) && I % N == 0) {
    if (bf16) launch_swiglu_halves<bf16_t, 8>(gu, y, rows, I, s);
    else launch_swiglu_halves<float, 4>(gu, y, rows, I, s);
  } else {
    if (bf16) launch_swiglu_halves<bf16_t, 1>(gu, y, rows, I, s);
    else launch_swiglu_halves<float, 1>(gu, y, rows, I, s);
  }
  check_launch("swiglu_halves_forward");
}

void swiglu_backward(const void* g, const void* u, bool gu_bf16, const void* dy, bool dy_bf16, void* dg, bool dg_bf16,
                     void* du, bool du_bf16, int64_t n, void* stream, bool dg_fresh, bool du_fresh) {
  if (n == 0 || (!dg && !du)) return;
  const bool aligned = aligned16(g) && aligned16(u) && aligned16(dy) && (!dg || aligned16(dg)) && (!du || aligned16(du));
  const int64_t packs = aligned ? n / kPack : 0;
  // A null gradient takes the other's dtype, so it adds no instantiation.
  if (!dg) dg_bf16 = du_bf16;
  if (!du) du_bf16 = dg_bf16;
  with_dtype(gu_bf16, [&](auto ti) {
    with_dtype(dy_bf16, [&](auto td) {
      with_dtype(dg_bf16, [&](auto tg) {
        with_dtype(du_bf16, [&](auto tu) {
          using TI = typename decltype(ti)::type;
          using TD = typename decltype(td)::type;
          using TG = typename decltype(tg)::type;
          using TU = typename decltype(tu)::type;
          constexpr auto kernel = swiglu_backward_kernel<TI, TD, TG, TU>;
          kernel<<<grid_for<kernel>(packs > 0 ? packs : n, kThreads), kThreads, 0, as_stream(stream)>>>(
              static_cast<const TI*>(g), static_cast<const TI*>(u), static_cast<const TD*>(dy), static_cast<TG*>(dg),
              static_cast<TU*>(du), n, packs, dg_fresh, du_fresh);
        });
      });
    });
  });
  check_launch("swiglu_backward");
}

}  // namespace dflash::kernels::cuda

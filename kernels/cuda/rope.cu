// Rotary position embedding on the GPU, rotate-half convention (HF Llama/Qwen), forward and
// backward. The angle is the f32 product float(pos) * inv_freq[i] and cos/sin are taken in f32
// (accurate sincosf, no fast math), as on the CPU. Templated on each pointer's dtype; 8-element
// packs (16-byte accesses) when hd % 16 == 0 and both tensors are 16-byte aligned.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// The rotation of one pair (x1 = x[i], x2 = x[i + hd/2]) with the rounding of the original scalar
// kernel pinned by intrinsics (what nvcc made of the expressions in the comments).
struct Rotate {
  float cs, sn;
  // y1 = x1 c - x2 s, y2 = x2 c + x1 s
  __device__ __forceinline__ void forward(float x1, float x2, float& y1, float& y2) const {
    y1 = __fmaf_rn(x1, cs, -__fmul_rn(x2, sn));
    y2 = __fmaf_rn(x1, sn, __fmul_rn(x2, cs));
  }
  // dx1 += dy1 c + dy2 s, dx2 += dy2 c - dy1 s
  __device__ __forceinline__ void inverse_add(float d1, float d2, float& y1, float& y2) const {
    y1 = __fadd_rn(y1, __fmaf_rn(d1, cs, __fmul_rn(d2, sn)));
    y2 = __fadd_rn(y2, __fmaf_rn(d2, cs, -__fmul_rn(d1, sn)));
  }
};

template <class T, int U>
__device__ __forceinline__ void load_units(const T* p, float (&v)[U]) {
  if constexpr (U == kPack) load_pack(p, v);
  else v[0] = to_float(p[0]);
}
template <class T, int U>
__device__ __forceinline__ void store_units(T* p, const float (&v)[U]) {
  if constexpr (U == kPack) store_pack(p, v);
  else p[0] = from_float<T>(v[0]);
}

// x, y (rows, heads, hd); positions (rows); inv_freq (hd/2). One task = (row r, head group, U
// consecutive frequencies i): the task's angles are taken once and reused for every head of its
// group (heads_per_group consecutive heads). kMode: y = R(angle) x (kForward), y += R(-angle) x
// (kInverseAdd), y = R(-angle) x (kInverseSet).
enum RopeMode { kForward, kInverseAdd, kInverseSet };
template <int kMode, class TX, class TY, int U>
__global__ void __launch_bounds__(kThreads)
    rope_kernel(const TX* x, const int32_t* positions, const float* inv_freq, TY* y, int64_t rows, int64_t heads,
                int64_t hd, int64_t heads_per_group) {
  const int64_t half = hd / 2, units = half / U, groups = (heads + heads_per_group - 1) / heads_per_group;
  const int64_t tasks = rows * groups * units, stride = int64_t(gridDim.x) * kThreads;
  for (int64_t t = blockIdx.x * int64_t(kThreads) + threadIdx.x; t < tasks; t += stride) {
    const int64_t q = t % units, rg = t / units, r = rg / groups, h0 = (rg % groups) * heads_per_group;
    const int64_t h1 = h0 + heads_per_group < heads ? h0 + heads_per_group : heads;
    Rotate rot[U];
    const float pos = float(positions[r]);
#pragma unroll
    for (int j = 0; j < U; ++j) sincosf(pos * inv_freq[q * U + j], &rot[j].sn, &rot[j].cs);
    for (int64_t h = h0; h < h1; ++h) {
      const int64_t lo = (r * heads + h) * hd + q * U, hi = lo + half;
      float x1[U], x2[U], y1[U], y2[U];
      load_units<TX, U>(x + lo, x1);
      load_units<TX, U>(x + hi, x2);
      if constexpr (kMode == kInverseAdd) {
        load_units<TY, U>(y + lo, y1);
        load_units<TY, U>(y + hi, y2);
#pragma unroll
        for (int j = 0; j < U; ++j) rot[j].inverse_add(x1[j], x2[j], y1[j], y2[j]);
      } else if constexpr (kMode == kInverseSet) {  // added to 0, so the bits of a zero-filled y
#pragma unroll
        for (int j = 0; j < U; ++j) y1[j] = y2[j] = 0.0f, rot[j].inverse_add(x1[j], x2[j], y1[j], y2[j]);
      } else {
#pragma unroll
        for (int j = 0; j < U; ++j) rot[j].forward(x1[j], x2[j], y1[j], y2[j]);
      }
      store_units<TY, U>(y + lo, y1);
      store_units<TY, U>(y + hi, y2);
    }
  }
}

template <int kMode, class TX, class TY, int U>
void launch_rope(const void* x, const int32_t* positions, const float* inv_freq, void* y, int64_t rows, int64_t heads,
                 int64_t hd, cudaStream_t s) {
  constexpr auto kernel = rope_kernel<kMode, TX, TY, U>;
  // Heads per task: few enough that the tasks fill the GPU twice over, so the angles are shared
  // by as many heads as the parallelism allows (the result does not depend on the grouping).
  const int64_t per_head_tasks = rows * (hd / 2 / U);
  const int64_t want = int64_t(grid_for<kernel>(int64_t(1) << 40, kThreads)) * kThreads * 2;
  const int64_t groups = per_head_tasks >= want ? 1 : (want + per_head_tasks - 1) / per_head_tasks;
  const int64_t heads_per_group = groups >= heads ? 1 : (heads + groups - 1) / groups;
  const int64_t tasks = per_head_tasks * ((heads + heads_per_group - 1) / heads_per_group);
  kernel<<<grid_for<kernel>(tasks, kThreads), kThreads, 0, s>>>(static_cast<const TX*>(x), positions, inv_freq,
                                                                static_cast<TY*>(y), rows, heads, hd, heads_per_group);
}

template <int kMode>
void dispatch(const void* x, bool x_bf16, const int32_t* positions, const float* inv_freq, void* y, bool y_bf16,
              int64_t rows, int64_t heads, int64_t hd, cudaStream_t s) {
  const bool packs = hd % (2 * kPack) == 0 && aligned16(x) && aligned16(y);
  with_dtype(x_bf16, [&](auto tx) {
    with_dtype(y_bf16, [&](auto ty) {
      using TX = typename decltype(tx)::type;
      using TY = typename decltype(ty)::type;
      if (packs) launch_rope<kMode, TX, TY, kPack>(x, positions, inv_freq, y, rows, heads, hd, s);
      else launch_rope<kMode, TX, TY, 1>(x, positions, inv_freq, y, rows, heads, hd, s);
    });
  });
}
}  // namespace

// x, y (rows, heads, hd) of one dtype; positions (rows); inv_freq (hd/2) f32.
void rope_forward(const void* x, const int32_t* positions, const float* inv_freq, void* y, bool bf16, int64_t rows,
                  int64_t heads, int64_t hd, void* stream) {
  if (rows * (hd / 2) == 0 || heads == 0) return;
  dispatch<kForward>(x, bf16, positions, inv_freq, y, bf16, rows, heads, hd, as_stream(stream));
  check_launch("rope_forward");
}

// dy, dx (rows, heads, hd): dx += R(-angle) dy (= when dx is fresh).
void rope_backward(const void* dy, bool dy_bf16, const int32_t* positions, const float* inv_freq, void* dx,
                   bool dx_bf16, int64_t rows, int64_t heads, int64_t hd, void* stream, bool dx_fresh) {
  if (rows * (hd / 2) == 0 || heads == 0) return;
  if (dx_fresh) dispatch<kInverseSet>(dy, dy_bf16, positions, inv_freq, dx, dx_bf16, rows, heads, hd, as_stream(stream));
  else dispatch<kInverseAdd>(dy, dy_bf16, positions, inv_freq, dx, dx_bf16, rows, heads, hd, as_stream(stream));
  check_launch("rope_backward");
}

}  // namespace dflash::kernels::cuda

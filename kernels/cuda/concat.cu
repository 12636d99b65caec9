// Concatenation of two row-major blocks on the GPU: forward copies bytes (any dtype) in the
// widest unit the sizes and addresses allow; backward splits a float gradient and accumulates
// each part into its input (templated on each pointer's dtype, 8-element packs where aligned).
// split_forward, the forward's inverse for up to kMaxSplitParts parts, copies bytes likewise.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// a (outer, A), b (outer, B), y (outer, A + B), in units of U.
template <class U>
__global__ void concat_forward_kernel(const U* a, const U* b, U* y, int64_t outer, int64_t A, int64_t B) {
  const int64_t W = A + B, n = outer * W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / W, k = e % W;
    y[e] = k < A ? a[o * A + k] : b[o * B + (k - A)];
  }
}

template <class U>
void launch_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_bytes, size_t b_bytes,
                    cudaStream_t s) {
  const int64_t A = int64_t(a_bytes / sizeof(U)), B = int64_t(b_bytes / sizeof(U));
  concat_forward_kernel<U><<<blocks_for(outer * (A + B), kThreads), kThreads, 0, s>>>(
      static_cast<const U*>(a), static_cast<const U*>(b), static_cast<U*>(y), outer, A, B);
}

// x (outer, W) -> part i (outer, width[i]) = x[:, start[i] : start[i] + width[i]], in units of U.
struct SplitParts {
  void* dst[kMaxSplitParts];
  int64_t start[kMaxSplitParts + 1];  // start[n] = W
  int n;
};
template <class U>
__global__ void split_forward_kernel(const U* x, int64_t outer, SplitParts p) {
  const int64_t W = p.start[p.n], n = outer * W;
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < n; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t o = e / W, k = e % W;
    int i = 0;
    while (k >= p.start[i + 1]) ++i;
    static_cast<U*>(p.dst[i])[o * (p.start[i + 1] - p.start[i]) + (k - p.start[i])] = x[e];
  }
}

// dy (outer, A + B) -> da (outer, A) += dy[:, :A] (blockIdx.y == 0), db (outer, B) += dy[:, A:]
// (blockIdx.y == 1); a null part does nothing. U elements per unit: 8 (packs; A and B multiples
// of 8 and every pointer 16-byte aligned, so every row start is too) or 1. Each element is
// dst + dy in f32, rounded once to dst's dtype, as before.
template <class TS, class TA, class TB, int U>
__global__ void __launch_bounds__(kThreads)
    concat_backward_kernel(const TS* dy, TA* da, TB* db, int64_t outer, int64_t A, int64_t B) {
  const bool second = blockIdx.y == 1;
  const int64_t W = A + B, L = second ? B : A, off = second ? A : 0, units = L / U, total = outer * units;
  if ((second ? static_cast<void*>(db) : static_cast<void*>(da)) == nullptr || total == 0) return;
  const int64_t stride = int64_t(gridDim.x) * kThreads;
  int64_t e = blockIdx.x * int64_t(kThreads) + threadIdx.x;
  if (e >= total) return;
  // (o, k): row and unit of e, stepped without a division per unit.
  int64_t o = e / units, k = e - o * units;
  const int64_t step_o = stride / units, step_k = stride - step_o * units;
  for (; e < total; e += stride) {
    const TS* src = dy + o * W + off + k * U;
    const int64_t d = o * L + k * U;
    if constexpr (U == kPack) {
      float s[kPack], acc[kPack];
      load_pack(src, s);
      if (second) {
        load_pack(db + d, acc);
#pragma unroll
        for (int j = 0; j < kPack; ++j) acc[j] = __fadd_rn(acc[j], s[j]);
        store_pack(db + d, acc);
      } else {
        load_pack(da + d, acc);
#pragma unroll
        for (int j = 0; j < kPack; ++j) acc[j] = __fadd_rn(acc[j], s[j]);
        store_pack(da + d, acc);
      }
    } else {
      const float s = to_float(src[0]);
      if (second) db[d] = from_float<TB>(__fadd_rn(to_float(db[d]), s));
      else da[d] = from_float<TA>(__fadd_rn(to_float(da[d]), s));
    }
    k += step_k;
    o += step_o;
    if (k >= units) {
      k -= units;
      ++o;
    }
  }
}

template <int U>
void launch_backward(const void* dy, bool dy_bf16, void* da, bool da_bf16, void* db, bool db_bf16, int64_t outer,
                     int64_t A, int64_t B, cudaStream_t s) {
  if (!da) da_bf16 = db_bf16;  // a null part takes the other's dtype: no extra instantiation
  if (!db) db_bf16 = da_bf16;
  const int64_t longest = outer * ((da ? A : 0) > (db ? B : 0) ? A : B) / U;
  with_dtype(dy_bf16, [&](auto ts) {
    with_dtype(da_bf16, [&](auto ta) {
      with_dtype(db_bf16, [&](auto tb) {
        using TS = typename decltype(ts)::type;
        using TA = typename decltype(ta)::type;
        using TB = typename decltype(tb)::type;
        constexpr auto kernel = concat_backward_kernel<TS, TA, TB, U>;
        const dim3 grid(grid_for<kernel>(longest, kThreads), 2);
        kernel<<<grid, kThreads, 0, s>>>(static_cast<const TS*>(dy), static_cast<TA*>(da), static_cast<TB*>(db),
                                         outer, A, B);
      });
    });
  });
}
}  // namespace

void concat_forward(const void* a, const void* b, void* y, int64_t outer, size_t a_inner_bytes, size_t b_inner_bytes,
                    void* stream) {
  if (outer == 0 || a_inner_bytes + b_inner_bytes == 0) return;
  cudaStream_t s = as_stream(stream);
  auto fits = [&](size_t u) {
    return a_inner_bytes % u == 0 && b_inner_bytes % u == 0 && reinterpret_cast<uintptr_t>(a) % u == 0 &&
           reinterpret_cast<uintptr_t>(b) % u == 0 && reinterpret_cast<uintptr_t>(y) % u == 0;
  };
  if (fits(16)) launch_forward<uint4>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else if (fits(8)) launch_forward<uint2>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else if (fits(4)) launch_forward<uint32_t>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else if (fits(2)) launch_forward<uint16_t>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  else launch_forward<uint8_t>(a, b, y, outer, a_inner_bytes, b_inner_bytes, s);
  check_launch("concat_forward");
}

void split_forward(const void* x, int64_t outer, void* const* parts, const size_t* inner, int n, void* stream) {
  if (n < 1 || n > kMaxSplitParts)
    throw std::runtime_error("split_forward: " + std::to_string(n) + " parts; give 1 to " +
                             std::to_string(kMaxSplitParts));
  size_t row = 0;
  for (int i = 0; i < n; ++i) row += inner[i];
  if (outer == 0 || row == 0) return;
  auto fits = [&](size_t u) {
    if (reinterpret_cast<uintptr_t>(x) % u != 0) return false;
    for (int i = 0; i < n; ++i)
      if (inner[i] % u != 0 || reinterpret_cast<uintptr_t>(parts[i]) % u != 0) return false;
    return true;
  };
  auto launch = [&](auto unit) {
    using U = decltype(unit);
    SplitParts p{};
    p.n = n;
    p.start[0] = 0;
    for (int i = 0; i < n; ++i) {
      p.dst[i] = parts[i];
      p.start[i + 1] = p.start[i] + int64_t(inner[i] / sizeof(U));
    }
    split_forward_kernel<U><<<blocks_for(outer * p.start[n], kThreads), kThreads, 0, as_stream(stream)>>>(
        static_cast<const U*>(x), outer, p);
  };
  if (fits(16)) launch(uint4{});
  else if (fits(8)) launch(uint2{});
  else if (fits(4)) launch(uint32_t{});
  else if (fits(2)) launch(uint16_t{});
  else launch(uint8_t{});
  check_launch("split_forward");
}

void concat_backward(const void* dy, bool dy_bf16, void* da, bool da_bf16, void* db, bool db_bf16, int64_t outer,
                     int64_t a_inner, int64_t b_inner, void* stream) {
  const int64_t n = outer * (a_inner + b_inner);
  if (n == 0 || (!da && !db)) return;
  const bool packs = a_inner % kPack == 0 && b_inner % kPack == 0 && aligned16(dy) && (!da || aligned16(da)) &&
                     (!db || aligned16(db));
  if (packs) launch_backward<kPack>(dy, dy_bf16, da, da_bf16, db, db_bf16, outer, a_inner, b_inner, as_stream(stream));
  else launch_backward<1>(dy, dy_bf16, da, da_bf16, db, db_bf16, outer, a_inner, b_inner, as_stream(stream));
  check_launch("concat_backward");
}

}  // namespace dflash::kernels::cuda

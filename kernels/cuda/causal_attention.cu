// The frozen target's causal softmax attention on the GPU, forward only (flash-attention style):
// one CTA per (query tile, b, head) walks the key tiles up to the diagonal with an online softmax
// in f32. bf16 runs on tensor cores (mma.sync m16n8k16, ldmatrix, cp.async double buffering, the
// score accumulators reused in registers as P; their query rows per CTA fit the device's shared
// memory: kernels/heuristics.h, causal_m_tiles); f32, unaligned bf16 and a head_dim whose tiles fit
// no tensor-core CTA run a CUDA-core kernel.
// Each output element is written once by one thread in a fixed order: deterministic.
#include <cmath>
#include <stdexcept>
#include <string>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_traits.h"

namespace dflash::kernels::cuda {

namespace {

constexpr float kLog2e = 1.4426950408889634f;

// ---- PTX wrappers (sm_80+) ----

// 16 bytes global -> shared, asynchronously; with !valid the 16 bytes are zero-filled (src unread).
__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  const int bytes = valid ? 16 : 0;
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(s), "l"(gmem), "r"(bytes));
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }
template <int Pending>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(Pending));
}

// Four 8x8 b16 matrices; lane l gives the address of row l % 8 of matrix l / 8 and receives in
// r[m] the elements (row l / 4, cols 2(l % 4), 2(l % 4) + 1) of matrix m (transposed with .trans:
// (rows 2(l % 4), 2(l % 4) + 1, col l / 4)).
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], const void* smem) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}
__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t r[4], const void* smem) {
  const unsigned s = unsigned(__cvta_generic_to_shared(smem));
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(s));
}

// c (16x8 f32) += a (16x16 bf16, row) * b (16x8 bf16, col). With g = lane / 4, t = lane % 4:
// a[0] = A[g][2t..2t+1], a[1] = A[g+8][2t..], a[2] = A[g][2t+8..], a[3] = A[g+8][2t+8..];
// b[0] = B[2t..2t+1][g], b[1] = B[2t+8..2t+9][g]; c = C[g][2t], C[g][2t+1], C[g+8][2t], C[g+8][2t+1].
__device__ __forceinline__ void mma_bf16(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Two floats as bf16x2 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16(float lo, float hi) {
  __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<uint32_t*>(&v);
}

// ---- Tensor-core kernel (bf16) ----

constexpr int kTcWarps = 4, kTcThreads = 32 * kTcWarps;
constexpr int kTcBN = 64;  // keys per tile

// HD: the head dim rounded up to a kernel size (32, 64, 128 or 256); columns hd..HD-1 are zero in
// shared memory. Each warp owns M m-tiles of 16 query rows (kernels/heuristics.h, causal_m_tiles:
// 2 up to HD 128 where the shared memory allows, else 1).
template <int HD, int M>
struct TcShape {
  static constexpr int MT = M;
  static constexpr int BM = kTcWarps * 16 * MT;  // query rows per CTA
  static constexpr int LD = HD + 8;  // shared row stride in elements: rows 16 bytes apart mod 128, so ldmatrix is conflict-free
  static constexpr size_t smem_bytes = size_t(BM + 4 * kTcBN) * LD * sizeof(bf16_t);
  static_assert(smem_bytes == heuristics::causal_tc_smem(HD, MT), "the rules' bytes are these");
};

// Grid (nh * B, query tiles), the last query tile (most key tiles) first. Shared memory:
// sQ (BM, LD), sK (2, BN, LD), sV (2, BN, LD); rows past S and columns past hd are zero.
// Warp w holds query rows [16 MT w, 16 MT (w + 1)) of the tile; per m-tile and lane (g, t as in
// mma_bf16): rows g and g + 8, so row statistics live in [mt][half] and are shared by the quad.
template <int HD, int M>
__global__ void __launch_bounds__(kTcThreads, HD <= 128 ? 2 : 1)
    causal_attention_tc_kernel(const bf16_t* __restrict__ q, const bf16_t* __restrict__ k,
                               const bf16_t* __restrict__ v, bf16_t* __restrict__ out, int S, int nh, int nkv, int hd,
                               float scale_log2) {
  using Shape = TcShape<HD, M>;
  constexpr int MT = Shape::MT, BM = Shape::BM, LD = Shape::LD, BN = kTcBN;
  constexpr int CPR = HD / 8;  // 16-byte chunks per shared row
  extern __shared__ __align__(16) unsigned char smem_raw[];
  bf16_t* sQ = reinterpret_cast<bf16_t*>(smem_raw);  // (BM, LD)
  bf16_t* sK = sQ + BM * LD;                          // (2, BN, LD)
  bf16_t* sV = sK + 2 * BN * LD;                      // (2, BN, LD)

  const int h = blockIdx.x % nh, b = blockIdx.x / nh;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * BM;  // first query of the tile
  const int hk = h / (nh / nkv);
  const int64_t q_stride = int64_t(nh) * hd, kv_stride = int64_t(nkv) * hd;  // between positions
  const bf16_t* qb = q + (int64_t(b) * S * nh + h) * hd;  // position i at qb + i * q_stride
  const bf16_t* kb = k + (int64_t(b) * S * nkv + hk) * hd;
  const bf16_t* vb = v + (int64_t(b) * S * nkv + hk) * hd;
  bf16_t* ob = out + (int64_t(b) * S * nh + h) * hd;
  const int chunks = hd / 8;  // valid chunks per row

  for (int c = threadIdx.x; c < BM * CPR; c += kTcThreads) {
    const int r = c / CPR, ch = c % CPR, i = i0 + r;
    const bool valid = i < S && ch < chunks;
    cp_async16(sQ + r * LD + ch * 8, valid ? qb + i * q_stride + ch * 8 : qb, valid);
  }
  auto load_kv = [&](int kt, int buf) {
    bf16_t* dk = sK + buf * BN * LD;
    bf16_t* dv = sV + buf * BN * LD;
    for (int c = threadIdx.x; c < BN * CPR; c += kTcThreads) {
      const int r = c / CPR, ch = c % CPR, j = kt * BN + r;
      const bool valid = j < S && ch < chunks;
      const int64_t off = valid ? j * kv_stride + ch * 8 : 0;
      cp_async16(dk + r * LD + ch * 8, kb + off, valid);
      cp_async16(dv + r * LD + ch * 8, vb + off, valid);
    }
  };

  const int q_end = min(i0 + BM, S);            // queries [i0, q_end) are real
  const int n_kt = (q_end + BN - 1) / BN;       // they see keys [0, q_end)
  load_kv(0, 0);
  cp_async_commit();  // group: Q and key tile 0

  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int wr0 = warp * 16 * MT;             // the warp's first row in the tile
  const int warp_i0 = i0 + wr0, warp_i1 = warp_i0 + 16 * MT - 1;  // its first and last query

  float o[MT][HD / 8][4];  // output rows (unnormalised), C fragments per 8 columns
  float row_max[MT][2], row_sum[MT][2];  // log2-scaled running max; this lane's part of the row sum
#pragma unroll
  for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
    for (int dt = 0; dt < HD / 8; ++dt) o[mt][dt][0] = o[mt][dt][1] = o[mt][dt][2] = o[mt][dt][3] = 0.0f;
    row_max[mt][0] = row_max[mt][1] = -INFINITY;
    row_sum[mt][0] = row_sum[mt][1] = 0.0f;
  }

  for (int kt = 0; kt < n_kt; ++kt) {
    if (kt + 1 < n_kt) {
      load_kv(kt + 1, (kt + 1) & 1);
      cp_async_commit();
      cp_async_wait<1>();  // everything but the tile just issued has landed
    } else {
      cp_async_wait<0>();
    }
    __syncthreads();
    const int j0 = kt * BN;
    // Key tile 0 is never skipped, so every row has a finite max (key 0) before any masked tile.
    if (j0 <= warp_i1) {
      const bf16_t* ks = sK + (kt & 1) * BN * LD;
      const bf16_t* vs = sV + (kt & 1) * BN * LD;
      // S = Q K^T: s[mt][nt] holds keys j0 + 8 nt .. + 7.
      float s[MT][BN / 8][4];
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) s[mt][nt][0] = s[mt][nt][1] = s[mt][nt][2] = s[mt][nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        uint32_t a[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)  // A: rows wr0 + 16 mt + (l % 16), cols 16 kk + 8 (l / 16)
          ldmatrix_x4(a[mt], sQ + (wr0 + mt * 16 + (lane & 15)) * LD + kk * 16 + (lane >> 4) * 8);
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          // B = K^T for key tiles 2np (regs 0, 1) and 2np + 1 (regs 2, 3): matrix m covers keys
          // 16 np + 8 (m / 2), dims 16 kk + 8 (m % 2).
          uint32_t bk[4];
          ldmatrix_x4(bk, ks + (np * 16 + (lane & 7) + ((lane >> 4) << 3)) * LD + kk * 16 + ((lane >> 3) & 1) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(s[mt][2 * np], a[mt], bk[0], bk[1]);
            mma_bf16(s[mt][2 * np + 1], a[mt], bk[2], bk[3]);
          }
        }
      }
      // Online softmax in the log2 domain; keys after the query get -inf (p = 0).
      const bool masked = j0 + BN - 1 > warp_i0;
#pragma unroll
      for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int half = 0; half < 2; ++half) {
          const int i = warp_i0 + mt * 16 + g + 8 * half;
          float mx = row_max[mt][half];
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              float x = s[mt][nt][2 * half + e] * scale_log2;
              if (masked && j0 + nt * 8 + 2 * t + e > i) x = -INFINITY;
              s[mt][nt][2 * half + e] = x;
              mx = fmaxf(mx, x);
            }
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float correction = exp2f(row_max[mt][half] - mx);  // 0 at the first tile
          row_max[mt][half] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
              const float p = exp2f(s[mt][nt][2 * half + e] - mx);
              s[mt][nt][2 * half + e] = p;
              sum += p;
            }
          row_sum[mt][half] = row_sum[mt][half] * correction + sum;
#pragma unroll
          for (int dt = 0; dt < HD / 8; ++dt) {
            o[mt][dt][2 * half] *= correction;
            o[mt][dt][2 * half + 1] *= correction;
          }
        }
      // O += P V: P's C fragments for keys 16 kc .. + 15 are the A fragment of that key chunk.
#pragma unroll
      for (int kc = 0; kc < BN / 16; ++kc) {
        uint32_t pa[MT][4];
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
          pa[mt][0] = pack_bf16(s[mt][2 * kc][0], s[mt][2 * kc][1]);
          pa[mt][1] = pack_bf16(s[mt][2 * kc][2], s[mt][2 * kc][3]);
          pa[mt][2] = pack_bf16(s[mt][2 * kc + 1][0], s[mt][2 * kc + 1][1]);
          pa[mt][3] = pack_bf16(s[mt][2 * kc + 1][2], s[mt][2 * kc + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          // B = V (keys x dims), transposed loads: matrix m covers keys 16 kc + 8 (m % 2), dims
          // 16 dp + 8 (m / 2); regs 0, 1 feed dim tile 2dp, regs 2, 3 dim tile 2dp + 1.
          uint32_t bv[4];
          ldmatrix_x4_trans(bv, vs + (kc * 16 + (lane & 7) + (((lane >> 3) & 1) << 3)) * LD + dp * 16 + (lane >> 4) * 8);
#pragma unroll
          for (int mt = 0; mt < MT; ++mt) {
            mma_bf16(o[mt][2 * dp], pa[mt], bv[0], bv[1]);
            mma_bf16(o[mt][2 * dp + 1], pa[mt], bv[2], bv[3]);
          }
        }
      }
    }
    __syncthreads();  // the buffer just read is the next iteration's load target
  }

  // out = O / row sum (the quad's four partial sums, added in butterfly order: same bits in every lane).
#pragma unroll
  for (int mt = 0; mt < MT; ++mt)
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      float l = row_sum[mt][half];
      l += __shfl_xor_sync(0xffffffffu, l, 1);
      l += __shfl_xor_sync(0xffffffffu, l, 2);
      const float inv = 1.0f / l;
      const int i = warp_i0 + mt * 16 + g + 8 * half;
      if (i >= S) continue;
      bf16_t* orow = ob + i * q_stride;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt) {
        const int d = dt * 8 + 2 * t;
        if (d < hd)
          *reinterpret_cast<__nv_bfloat162*>(orow + d) =
              __floats2bfloat162_rn(o[mt][dt][2 * half] * inv, o[mt][dt][2 * half + 1] * inv);
      }
    }
}

template <int HD, int M>
void launch_tc(const CausalAttentionArgs& a, cudaStream_t s) {
  using Shape = TcShape<HD, M>;
  const auto kernel = causal_attention_tc_kernel<HD, M>;
  // Per device and cheap; legal inside stream capture (it is not a stream operation).
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(Shape::smem_bytes));
  if (e != cudaSuccess)
    throw std::runtime_error("causal_attention: cannot allow " + std::to_string(Shape::smem_bytes) +
                             " bytes of shared memory a CTA (head_dim " + std::to_string(a.hd) +
                             "): " + cudaGetErrorString(e));
  const dim3 grid(unsigned(a.nh * a.B), unsigned((a.S + Shape::BM - 1) / Shape::BM));
  kernel<<<grid, kTcThreads, Shape::smem_bytes, s>>>(static_cast<const bf16_t*>(a.q), static_cast<const bf16_t*>(a.k),
                                                      static_cast<const bf16_t*>(a.v), static_cast<bf16_t*>(a.out),
                                                      int(a.S), int(a.nh), int(a.nkv), int(a.hd), a.scale * kLog2e);
}

// ---- CUDA-core kernel (f32, or bf16 at unaligned addresses) ----

constexpr int kCcBM = 32, kCcBN = 32, kCcThreads = 256;
constexpr int kCcMaxDimsPerThread = int(kCausalAttentionMaxHeadDim) / 8;

size_t cc_smem_bytes(int64_t hd) {
  return size_t(kCcBM * (hd + 1) + kCcBN * (hd + 1) + kCcBN * hd + kCcBM * (kCcBN + 1)) * sizeof(float);
}

// Grid as the tensor-core kernel. Thread (r = tid / 8, c8 = tid % 8): query row r of the tile,
// keys c8 + 8 m of each key tile, output dims c8 + 8 m. The 8 threads of a row (adjacent lanes)
// hold identical row statistics. Shared (f32): sQ (BM, hd+1), sK (BN, hd+1), sV (BN, hd), sP (BM, BN+1).
template <class T>
__global__ void __launch_bounds__(kCcThreads)
    causal_attention_cc_kernel(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                               T* __restrict__ out, int S, int nh, int nkv, int hd, float scale_log2) {
  extern __shared__ float smem_f[];
  float* sQ = smem_f;                         // (BM, hd + 1)
  float* sK = sQ + kCcBM * (hd + 1);          // (BN, hd + 1)
  float* sV = sK + kCcBN * (hd + 1);          // (BN, hd)
  float* sP = sV + kCcBN * hd;                // (BM, BN + 1)

  const int h = blockIdx.x % nh, b = blockIdx.x / nh;
  const int i0 = (gridDim.y - 1 - blockIdx.y) * kCcBM;
  const int hk = h / (nh / nkv);
  const int64_t q_stride = int64_t(nh) * hd, kv_stride = int64_t(nkv) * hd;
  const T* qb = q + (int64_t(b) * S * nh + h) * hd;
  const T* kb = k + (int64_t(b) * S * nkv + hk) * hd;
  const T* vb = v + (int64_t(b) * S * nkv + hk) * hd;
  T* ob = out + (int64_t(b) * S * nh + h) * hd;

  for (int idx = threadIdx.x; idx < kCcBM * hd; idx += kCcThreads) {
    const int r = idx / hd, d = idx % hd, i = i0 + r;
    sQ[r * (hd + 1) + d] = i < S ? to_float(qb[i * q_stride + d]) : 0.0f;
  }
  const int r = threadIdx.x >> 3, c8 = threadIdx.x & 7, i = i0 + r;
  const int q_end = min(i0 + kCcBM, S), n_kt = (q_end + kCcBN - 1) / kCcBN;
  float acc[kCcMaxDimsPerThread];
#pragma unroll
  for (int m = 0; m < kCcMaxDimsPerThread; ++m) acc[m] = 0.0f;
  float row_max = -INFINITY, row_sum = 0.0f;

  for (int kt = 0; kt < n_kt; ++kt) {
    const int j0 = kt * kCcBN;
    __syncthreads();  // the previous tile's sK, sV, sP are no longer read
    for (int idx = threadIdx.x; idx < kCcBN * hd; idx += kCcThreads) {
      const int c = idx / hd, d = idx % hd, j = j0 + c;
      const bool valid = j < S;
      sK[c * (hd + 1) + d] = valid ? to_float(kb[j * kv_stride + d]) : 0.0f;
      sV[c * hd + d] = valid ? to_float(vb[j * kv_stride + d]) : 0.0f;
    }
    __syncthreads();
    float x[kCcBN / 8];
#pragma unroll
    for (int m = 0; m < kCcBN / 8; ++m) x[m] = 0.0f;
    for (int d = 0; d < hd; ++d) {
      const float qv = sQ[r * (hd + 1) + d];
#pragma unroll
      for (int m = 0; m < kCcBN / 8; ++m) x[m] += qv * sK[(c8 + 8 * m) * (hd + 1) + d];
    }
    float mx = row_max;
#pragma unroll
    for (int m = 0; m < kCcBN / 8; ++m) {
      x[m] = j0 + c8 + 8 * m > i ? -INFINITY : x[m] * scale_log2;
      mx = fmaxf(mx, x[m]);
    }
    for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    // Key tile 0 holds key 0, which every row sees: mx is finite from the first tile on.
    const float correction = exp2f(row_max - mx);
    row_max = mx;
    float sum = 0.0f;
#pragma unroll
    for (int m = 0; m < kCcBN / 8; ++m) {
      const float p = exp2f(x[m] - mx);
      sP[r * (kCcBN + 1) + c8 + 8 * m] = p;
      sum += p;
    }
    for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    row_sum = row_sum * correction + sum;
    __syncwarp();  // the row's P (written by this warp's lanes) is visible to the warp
#pragma unroll
    for (int m = 0; m < kCcMaxDimsPerThread; ++m) acc[m] *= correction;
    for (int c = 0; c < kCcBN; ++c) {
      const float p = sP[r * (kCcBN + 1) + c];
#pragma unroll
      for (int m = 0; m < kCcMaxDimsPerThread; ++m)
        if (c8 + 8 * m < hd) acc[m] += p * sV[c * hd + c8 + 8 * m];
    }
  }
  if (i >= S) return;
  const float inv = 1.0f / row_sum;
  T* orow = ob + i * q_stride;
#pragma unroll
  for (int m = 0; m < kCcMaxDimsPerThread; ++m)
    if (c8 + 8 * m < hd) orow[c8 + 8 * m] = from_float<T>(acc[m] * inv);
}

template <class T>
void launch_cc(const CausalAttentionArgs& a, cudaStream_t s) {
  const auto kernel = causal_attention_cc_kernel<T>;
  const size_t smem = cc_smem_bytes(a.hd);
  cudaError_t e = cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e != cudaSuccess)
    throw std::runtime_error("causal_attention: cannot allow " + std::to_string(smem) +
                             " bytes of shared memory a CTA (head_dim " + std::to_string(a.hd) +
                             "; this GPU allows fewer: kernels/heuristics.h, smem_per_block): " +
                             cudaGetErrorString(e));
  const dim3 grid(unsigned(a.nh * a.B), unsigned((a.S + kCcBM - 1) / kCcBM));
  kernel<<<grid, kCcThreads, smem, s>>>(static_cast<const T*>(a.q), static_cast<const T*>(a.k),
                                        static_cast<const T*>(a.v), static_cast<T*>(a.out), int(a.S), int(a.nh),
                                        int(a.nkv), int(a.hd), a.scale * kLog2e);
}

}  // namespace

void causal_attention_forward(const CausalAttentionArgs& a, void* stream) {
  if (a.hd <= 0 || a.hd % 8 != 0 || a.hd > kCausalAttentionMaxHeadDim || a.nkv <= 0 || a.nh % a.nkv != 0)
    throw std::runtime_error("causal_attention: head dim " + std::to_string(a.hd) +
                             " must be a positive multiple of 8 up to " + std::to_string(kCausalAttentionMaxHeadDim) +
                             " and the query heads a multiple of the kv heads");
  if (a.B == 0 || a.S == 0 || a.nh == 0) return;
  cudaStream_t s = as_stream(stream);
  const bool aligned = aligned16(a.q) && aligned16(a.k) && aligned16(a.v) && aligned16(a.out);
  if (!a.bf16) launch_cc<float>(a, s);
  else if (!aligned) launch_cc<bf16_t>(a, s);
  else if (const int mt = heuristics::causal_m_tiles(device_traits(), a.hd); mt == 0) launch_cc<bf16_t>(a, s);
  else if (a.hd <= 32) launch_tc<32, 2>(a, s);  // 2 m tiles fit every device up to head_dim 64
  else if (a.hd <= 64) launch_tc<64, 2>(a, s);
  else if (a.hd <= 128 && mt == 2) launch_tc<128, 2>(a, s);
  else if (a.hd <= 128) launch_tc<128, 1>(a, s);
  else launch_tc<256, 1>(a, s);
  check_launch("causal_attention_forward");
}

}  // namespace dflash::kernels::cuda

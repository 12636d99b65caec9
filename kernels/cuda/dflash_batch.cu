// The DFlash step's data-side tensors (noise ids, positions, labels, loss weights) and its metric
// sums on the GPU, equal bit for bit to kernels/cpu/dflash_batch.cpp: prepare is integer logic plus
// a decay table the host computes with the CPU's expression; metrics sums floats in double in the
// CPU's element order (one thread per sum) and counts in integers.
#include <cmath>
#include <stdexcept>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"

namespace dflash::kernels::cuda {

namespace {
constexpr int kThreads = 256;

// lw for slot k: lw0[k] when w = 0, lw1[k] when w = 1; the CPU's wk * exp(-float(k - 1) / gamma)
// (or wk without decay) evaluated on the host, so even 0 * inf = NaN keeps the CPU's bits.
struct DecayTable {
  float lw0[kDFlashMaxBlock];
  float lw1[kDFlashMaxBlock];
};

// One thread per element of k_pos's context part (B*S) and then per draft slot (B*T).
__global__ void prepare_kernel(const int32_t* input_ids, const int32_t* loss_mask, const int32_t* anchors,
                               const int32_t* keep, DFlashBatchDims d, DecayTable decay, int32_t* noise_ids,
                               int32_t* q_pos, int32_t* k_pos, int32_t* labels, float* w, float* lw) {
  const int64_t T = d.N * d.bs, context = d.B * d.S, total = context + d.B * T;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x) {
    if (i < context) {
      const int64_t b = i / d.S, j = i % d.S;
      k_pos[b * (d.S + T) + j] = int32_t(j);
      continue;
    }
    const int64_t slot = i - context;  // b * T + a * bs + k
    const int64_t b = slot / T, r = slot % T, a = r / d.bs, k = r % d.bs;
    const int32_t anchor = anchors[b * d.N + a];
    const bool kept = keep[b * d.N + a] != 0;
    const int64_t p = int64_t(anchor) + k;
    const bool inside = p >= 0 && p < d.S;
    const int32_t* ids = input_ids + b * d.S;  // (S)
    const int32_t* mask = loss_mask + b * d.S;
    noise_ids[slot] = (k == 0 && kept && inside) ? ids[p] : d.mask_token_id;
    q_pos[slot] = int32_t(p);
    k_pos[b * (d.S + T) + d.S + r] = int32_t(p);
    labels[slot] = inside ? ids[p] : -1;
    const bool weighted = kept && inside && k > 0 && mask[p] != 0;
    w[slot] = weighted ? 1.0f : 0.0f;
    lw[slot] = weighted ? decay.lw1[k] : decay.lw0[k];
  }
}

// One block of kThreads. Counts: each thread takes whole blocks (b, a) and scans their slots in
// order (exact integers, so any split gives the same totals). Float sums: threads 0, 32 and 64
// (one per warp) each add one sum in double over every element in index order, like the CPU,
// from tiles of kMetricsTile elements that the whole block first stages in shared memory (the
// chains then wait on shared loads only, not on one global load after another).
constexpr int kMetricsTile = 2048;
__global__ void metrics_kernel(const float* ce, const int32_t* argmax, const int32_t* labels, const float* w,
                               const float* lw, const int32_t* keep, int64_t B, int64_t N, int64_t bs, float* out) {
  __shared__ long long sh[kThreads / 32];
  __shared__ float s_lw[kMetricsTile], s_ce[kMetricsTile], s_w[kMetricsTile];
  long long hits = 0, slots = 0, tau = 0, kept = 0;
  for (int64_t blk = threadIdx.x; blk < B * N; blk += kThreads) {
    const int64_t base = blk * bs;
    bool run = true;
    long long accepted = 0;
    for (int64_t k = 0; k < bs; ++k) {
      const int64_t i = base + k;
      const bool weighted = w[i] > 0.5f, hit = weighted && argmax[i] == labels[i];
      slots += weighted;
      hits += hit;
      if (k > 0 && run) {
        if (hit) ++accepted;
        else run = false;
      }
    }
    if (keep[blk]) {
      kept += 1;
      tau += 1 + accepted;
    }
  }
  hits = block_sum<kThreads>(hits, sh);
  slots = block_sum<kThreads>(slots, sh);
  tau = block_sum<kThreads>(tau, sh);
  kept = block_sum<kThreads>(kept, sh);
  const int64_t n = B * N * bs;
  double sum = 0;  // thread 0: lw * ce; thread 32: lw; thread 64: w
  for (int64_t t0 = 0; t0 < n; t0 += kMetricsTile) {
    const int len = int(n - t0 < kMetricsTile ? n - t0 : kMetricsTile);
    __syncthreads();  // the previous tile's chains are done with it
    for (int j = threadIdx.x; j < len; j += kThreads) {
      s_lw[j] = lw[t0 + j];
      s_ce[j] = ce[t0 + j];
      s_w[j] = w[t0 + j];
    }
    __syncthreads();
    if (threadIdx.x == 0) {
#pragma unroll 8
      for (int j = 0; j < len; ++j) sum += double(s_lw[j]) * s_ce[j];
    } else if (threadIdx.x == 32) {
#pragma unroll 8
      for (int j = 0; j < len; ++j) sum += s_lw[j];
    } else if (threadIdx.x == 64) {
#pragma unroll 8
      for (int j = 0; j < len; ++j) sum += s_w[j];
    }
  }
  if (threadIdx.x == 0) {
    out[0] = float(sum);
    out[2] = float(double(hits));
    out[4] = float(double(tau));
    out[5] = float(double(kept));
    out[6] = float(double(slots));
  } else if (threadIdx.x == 32) {
    out[1] = float(sum);
  } else if (threadIdx.x == 64) {
    out[3] = float(sum);
  }
}
}  // namespace

void dflash_prepare(const int32_t* input_ids, const int32_t* loss_mask, const int32_t* anchors, const int32_t* keep,
                    const DFlashBatchDims& d, int32_t* noise_ids, int32_t* q_pos, int32_t* k_pos, int32_t* labels,
                    float* w, float* lw, void* stream) {
  if (d.bs > kDFlashMaxBlock)
    throw std::runtime_error("dflash_prepare: block size " + std::to_string(d.bs) + " exceeds the CUDA kernel's " +
                             std::to_string(kDFlashMaxBlock));
  const int64_t total = d.B * d.S + d.B * d.N * d.bs;
  if (total == 0) return;
  // The CPU computes lw = wk * std::exp(-float(k - 1) / gamma) per slot; the same expression here
  // (host code, the same libm) gives the same bits for both values of wk.
  DecayTable decay{};
  for (int64_t k = 0; k < d.bs; ++k) {
    const float e = d.gamma > 0 ? std::exp(-float(k - 1) / d.gamma) : 1.0f;
    const volatile float zero = 0.0f, one = 1.0f;  // the multiplication happens at run time, like the CPU's
    decay.lw0[k] = d.gamma > 0 ? zero * e : 0.0f;
    decay.lw1[k] = d.gamma > 0 ? one * e : 1.0f;
  }
  prepare_kernel<<<blocks_for(total, kThreads), kThreads, 0, as_stream(stream)>>>(
      input_ids, loss_mask, anchors, keep, d, decay, noise_ids, q_pos, k_pos, labels, w, lw);
  check_launch("dflash_prepare");
}

void dflash_metrics(const float* ce, const int32_t* argmax, const int32_t* labels, const float* w, const float* lw,
                    const int32_t* keep, int64_t B, int64_t N, int64_t bs, float* out, void* stream) {
  metrics_kernel<<<1, kThreads, 0, as_stream(stream)>>>(ce, argmax, labels, w, lw, keep, B, N, bs, out);
  check_launch("dflash_metrics");
}

}  // namespace dflash::kernels::cuda

// The DFlash step's data-side tensors (noise ids, positions, labels, loss weights) and its
// metric sums (loss numerator, accuracy, acceptance-length estimate). No gradients.
#include <cmath>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

void dflash_prepare(const int32_t* input_ids, const int32_t* loss_mask, const int32_t* anchors, const int32_t* keep,
                    const DFlashDims& d, int32_t* noise_ids, int32_t* q_pos, int32_t* k_pos, int32_t* labels, float* w,
                    float* lw) {
  const int64_t T = d.N * d.bs;
  for (int64_t b = 0; b < d.B; ++b) {
    const int32_t* ids = input_ids + b * d.S;  // (S)
    const int32_t* mask = loss_mask + b * d.S;
    int32_t* kp = k_pos + b * (d.S + T);       // (S + T)
    for (int64_t j = 0; j < d.S; ++j) kp[j] = int32_t(j);
    for (int64_t a = 0; a < d.N; ++a) {
      const int32_t anchor = anchors[b * d.N + a];
      const bool kept = keep[b * d.N + a] != 0;
      for (int64_t k = 0; k < d.bs; ++k) {
        const int64_t slot = b * T + a * d.bs + k, p = int64_t(anchor) + k;
        const bool inside = p >= 0 && p < d.S;
        noise_ids[slot] = (k == 0 && kept && inside) ? ids[p] : d.mask_token_id;
        q_pos[slot] = int32_t(p);
        kp[d.S + a * d.bs + k] = int32_t(p);
        labels[slot] = inside ? ids[p] : -1;
        float wk = (kept && inside && k > 0 && mask[p] != 0) ? 1.0f : 0.0f;
        w[slot] = wk;
        lw[slot] = d.gamma > 0 ? wk * std::exp(-float(k - 1) / d.gamma) : wk;
      }
    }
  }
}

void dflash_metrics(const float* ce, const int32_t* argmax, const int32_t* labels, const float* w, const float* lw,
                    const int32_t* keep, const DFlashDims& d, float* out) {
  double sum_lw_ce = 0, sum_lw = 0, hits = 0, sum_w = 0, tau = 0, kept = 0, slots = 0;
  for (int64_t b = 0; b < d.B; ++b)
    for (int64_t a = 0; a < d.N; ++a) {
      const int64_t base = (b * d.N + a) * d.bs;
      bool run = true;
      int64_t accepted = 0;
      for (int64_t k = 0; k < d.bs; ++k) {
        const int64_t i = base + k;
        sum_lw_ce += double(lw[i]) * ce[i];
        sum_lw += lw[i];
        sum_w += w[i];
        const bool hit = w[i] > 0.5f && argmax[i] == labels[i];
        if (w[i] > 0.5f) slots += 1;
        if (hit) hits += 1;
        if (k > 0 && run) {
          if (hit) ++accepted;
          else run = false;
        }
      }
      if (keep[b * d.N + a]) {
        kept += 1;
        tau += 1.0 + double(accepted);
      }
    }
  out[0] = float(sum_lw_ce);
  out[1] = float(sum_lw);
  out[2] = float(hits);
  out[3] = float(sum_w);
  out[4] = float(tau);
  out[5] = float(kept);
  out[6] = float(slots);
}

}  // namespace dflash::kernels::cpu

// Fused lm_head + softmax cross-entropy over one chunk of rows: the forward (logsumexp, CE,
// argmax, weighted loss) and the backward (logits turned in place into dlogits), side by side.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_kernels.h"

namespace dflash::kernels::cpu {

namespace {
constexpr int32_t kIgnoredLabel = -1;
constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

// Labels are staged and validated before a program runs; a label that slips through outside
// [-1, V) poisons its row with NaN (ce, loss, gradient) instead of reading out of bounds.
bool label_in_range(int32_t label, int64_t V) { return label >= 0 && int64_t(label) < V; }
}  // namespace

// logits (c, V) scratch; labels, weights, lse, ce, argmax (c); loss (1).
// lse is the stable logsumexp (max + log sum exp(x - max)); argmax is the first maximum; a row
// with label -1 gets ce 0. The chunk's weighted sum is taken in double, in row order, and then
// added to loss[0] once, so the loss depends only on the chunk size, never on timing.
void ce_chunk_forward(const float* logits, const int32_t* labels, const float* weights, int64_t c, int64_t V,
                      float* lse, float* ce, int32_t* argmax, float* loss) {
  double chunk_loss = 0.0;
  for (int64_t r = 0; r < c; ++r) {
    const float* x = logits + r * V;  // (V)
    float max = x[0];
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (x[v] > max) {
        max = x[v];
        best = v;
      }
    double sum = 0.0;
    for (int64_t v = 0; v < V; ++v) sum += double(std::exp(x[v] - max));
    float row_lse = max + float(std::log(sum));
    int32_t label = labels[r];
    float row_ce = label == kIgnoredLabel ? 0.0f : label_in_range(label, V) ? row_lse - x[label] : kNaN;
    lse[r] = row_lse;
    ce[r] = row_ce;
    argmax[r] = int32_t(best);
    chunk_loss += double(weights[r]) * double(row_ce);
  }
  loss[0] += float(chunk_loss);
}

// logits (c, V) in, dlogits (c, V) out; labels, weights, lse (c); dloss (1).
// dlogits = dloss * weights[r] * (softmax - onehot(label)). A row with weight 0 or label -1 gets
// exactly 0, so it adds exactly nothing to dh or dweight.
void ce_chunk_backward(float* logits, const int32_t* labels, const float* weights, const float* lse,
                       const float* dloss, int64_t c, int64_t V) {
  const float upstream = dloss[0];
  for (int64_t r = 0; r < c; ++r) {
    float* x = logits + r * V;  // (V)
    int32_t label = labels[r];
    if (weights[r] == 0.0f || label == kIgnoredLabel) {
      for (int64_t v = 0; v < V; ++v) x[v] = 0.0f;
      continue;
    }
    if (!label_in_range(label, V)) {
      for (int64_t v = 0; v < V; ++v) x[v] = kNaN;
      continue;
    }
    const float s = upstream * weights[r], row_lse = lse[r];
    for (int64_t v = 0; v < V; ++v) x[v] = s * std::exp(x[v] - row_lse);
    x[label] -= s;
  }
}

}  // namespace dflash::kernels::cpu

// Shared by the sampled-decoding tests (CPU and GPU): the reference's sampling distribution written
// independently (a sort, as z-lab's _sampling_probs), the target's own distribution of the first
// two new tokens of a prompt, and a chi-square statistic with its critical value.
#pragma once
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <utility>
#include <vector>

#include "model/target.h"
#include "runtime/tensor.h"

namespace dflash::test {

// softmax(logits / T) over the top_k largest, then the tokens whose strictly larger probabilities
// sum to less than top_p (in descending order, as a cumulative sum minus the token's own), renormalised.
inline std::vector<double> reference_sampling_probs(const std::vector<float>& logits, double T, double top_p,
                                                    int64_t top_k) {
  const size_t V = logits.size();
  std::vector<size_t> order(V);
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](size_t a, size_t b) { return logits[a] > logits[b]; });
  const size_t kept = top_k > 0 && size_t(top_k) < V ? size_t(top_k) : V;
  std::vector<double> p(V, 0.0);
  double sum = 0;
  for (size_t i = 0; i < kept; ++i) sum += p[order[i]] = std::exp((double(logits[order[i]]) - logits[order[0]]) / T);
  for (double& v : p) v /= sum;
  if (top_p < 1) {
    double above = 0, left = 0;
    for (size_t i = 0; i < kept; ++i) {
      const double own = p[order[i]];
      if (above >= top_p) p[order[i]] = 0;
      above += own;
      left += p[order[i]];
    }
    for (double& v : p) v /= left;
  }
  return p;
}

// The target's own sampling distribution of (first, second) new tokens after `prompt`, from its
// full forward (Target::logits, the training path), keyed by the pair; pairs of probability 0 omitted.
inline std::map<std::pair<int32_t, int32_t>, double> target_pair_distribution(const Target& target,
                                                                              const std::vector<int32_t>& prompt,
                                                                              double T, double top_p, int64_t top_k) {
  const int64_t V = target.spec().vocab_size;
  auto last_row = [&](const std::vector<int32_t>& ids) {
    std::vector<float> all = target.logits(Tensor::from_ints({1, int64_t(ids.size())}, ids)).to_floats();
    return std::vector<float>(all.end() - V, all.end());
  };
  std::map<std::pair<int32_t, int32_t>, double> dist;
  const std::vector<double> first = reference_sampling_probs(last_row(prompt), T, top_p, top_k);
  for (int32_t a = 0; a < V; ++a) {
    if (first[size_t(a)] <= 0) continue;
    std::vector<int32_t> ids = prompt;
    ids.push_back(a);
    const std::vector<double> second = reference_sampling_probs(last_row(ids), T, top_p, top_k);
    for (int32_t b = 0; b < V; ++b)
      if (second[size_t(b)] > 0) dist[{a, b}] = first[size_t(a)] * second[size_t(b)];
  }
  return dist;
}

// Pearson's statistic of `counts` (pairs outside `dist` count as impossible: any such sample makes
// the statistic infinite) over n samples.
inline double chi_square(const std::map<std::pair<int32_t, int32_t>, int64_t>& counts,
                         const std::map<std::pair<int32_t, int32_t>, double>& dist, int64_t n) {
  double chi2 = 0;
  for (const auto& [pair, c] : counts)
    if (!dist.count(pair)) return INFINITY;
  for (const auto& [pair, prob] : dist) {
    const double expected = prob * double(n);
    const auto it = counts.find(pair);
    const double d = double(it == counts.end() ? 0 : it->second) - expected;
    chi2 += d * d / expected;
  }
  return chi2;
}

// The chi-square critical value of `df` degrees of freedom at significance 0.001 (Wilson-Hilferty;
// within 1 % of the exact quantile for df >= 3).
inline double chi_square_critical_001(int64_t df) {
  const double z = 3.090232, k = double(df), c = 2.0 / (9.0 * k);
  return k * std::pow(1.0 - c + z * std::sqrt(c), 3.0);
}

}  // namespace dflash::test

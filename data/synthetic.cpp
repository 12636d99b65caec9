// Generation from a target: batched, one token per forward over the whole prefix (small targets).
#include "data/synthetic.h"

#include <cmath>
#include <random>
#include <set>

#include "model/target.h"
#include "runtime/autograd.h"
#include "runtime/context.h"

namespace dflash {

std::vector<Sequence> generate_from_target(const Target& target, const SyntheticDataConfig& c, int64_t count,
                                           uint64_t seed, int64_t mask_token_id) {
  DF_CHECK(c.prompt_length >= 1 && c.min_length > c.prompt_length && c.max_length >= c.min_length,
           "data.synthetic: need 1 <= prompt_length < min_length <= max_length (got " << c.prompt_length << ", "
                                                                                      << c.min_length << ", "
                                                                                      << c.max_length << ")");
  NoGrad no_grad;
  const int64_t V = target.spec().vocab_size;
  std::mt19937_64 rng(seed);
  std::vector<Sequence> out;
  const int64_t batch = 32;
  for (int64_t first = 0; first < count; first += batch) {
    const int64_t B = std::min(batch, count - first);
    std::vector<int64_t> lengths(static_cast<size_t>(B));
    for (auto& l : lengths) l = c.min_length + int64_t(rng() % uint64_t(c.max_length - c.min_length + 1));
    const int64_t L = *std::max_element(lengths.begin(), lengths.end());
    std::vector<std::vector<int32_t>> seqs(static_cast<size_t>(B));
    for (auto& s : seqs)
      for (int64_t i = 0; i < c.prompt_length; ++i) {
        int32_t t;
        do t = int32_t(rng() % uint64_t(V));
        while (t == mask_token_id);
        s.push_back(t);
      }
    for (int64_t len = c.prompt_length; len < L; ++len) {
      std::vector<int32_t> ids;
      for (const auto& s : seqs) ids.insert(ids.end(), s.begin(), s.end());
      Tensor logits = target.logits(Tensor::from_ints({B, len}, ids));  // (B, len, V)
      std::vector<float> lv = logits.to_floats();
      for (int64_t b = 0; b < B; ++b) {
        const float* row = lv.data() + (b * len + len - 1) * V;
        int32_t next = 0;
        if (c.temperature <= 0) {
          float best = -INFINITY;
          for (int64_t v = 0; v < V; ++v)
            if (v != mask_token_id && row[v] > best) best = row[v], next = int32_t(v);
        } else {
          float mx = -INFINITY;
          for (int64_t v = 0; v < V; ++v)
            if (v != mask_token_id) mx = std::max(mx, row[v]);
          std::vector<double> p(static_cast<size_t>(V));
          double z = 0;
          for (int64_t v = 0; v < V; ++v)
            z += p[size_t(v)] = v == mask_token_id ? 0.0 : std::exp(double(row[v] - mx) / c.temperature);
          double u = double(rng() >> 11) * 0x1.0p-53 * z;
          next = int32_t(V - 1);
          for (int64_t v = 0; v < V; ++v) {
            u -= p[size_t(v)];
            if (u < 0 && p[size_t(v)] > 0) {
              next = int32_t(v);
              break;
            }
          }
          if (next == mask_token_id) next = int32_t(mask_token_id == 0 ? 1 : 0);
        }
        seqs[size_t(b)].push_back(next);
      }
    }
    for (int64_t b = 0; b < B; ++b) {
      Sequence s;
      s.input_ids.assign(seqs[size_t(b)].begin(), seqs[size_t(b)].begin() + lengths[size_t(b)]);
      s.loss_mask.assign(size_t(lengths[size_t(b)]), 1);
      for (int64_t i = 0; i < c.prompt_length; ++i) s.loss_mask[size_t(i)] = 0;
      out.push_back(std::move(s));
    }
  }
  return out;
}

double distinct_4gram_share(const std::vector<Sequence>& sequences) {
  std::set<std::array<int32_t, 4>> distinct;
  int64_t total = 0;
  for (const Sequence& s : sequences)
    for (size_t i = 0; i + 4 <= s.input_ids.size(); ++i) {
      if (!s.loss_mask[i]) continue;
      distinct.insert({s.input_ids[i], s.input_ids[i + 1], s.input_ids[i + 2], s.input_ids[i + 3]});
      ++total;
    }
  return total ? double(distinct.size()) / double(total) : 0.0;
}

}  // namespace dflash

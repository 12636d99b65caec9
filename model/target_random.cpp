// Target::random: a target at any dims with random weights generated in memory, in parallel, by a
// counter-based generator (splitmix64 of seed, tensor and element), so no file is written.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "model/target.h"
#include "runtime/context.h"
#include "runtime/splitmix.h"

namespace dflash {

namespace {


// Fills `into` (f32 or bf16) with uniform values of standard deviation std (or all `constant` when
// std is 0), element e from splitmix64(seed, tensor, e).
void fill_random(const Tensor& into, uint64_t seed, uint64_t tensor, double std, float constant) {
  const int64_t n = into.numel();
  const DType dtype = into.dtype();
  const float half_width = float(std * std::sqrt(3.0));  // uniform(-w, w) has std w / sqrt(3)
  const uint64_t key = splitmix64(seed ^ splitmix64(tensor));
  auto value = [&](int64_t e) {
    if (std == 0) return constant;
    const double u = double(splitmix64(key + uint64_t(e)) >> 11) * (1.0 / 9007199254740992.0);  // [0, 1)
    return float((2.0 * u - 1.0) * half_width);
  };
  const bool bf16 = dtype == DType::bf16;
  std::vector<float> f(bf16 ? 0 : size_t(n));
  std::vector<uint16_t> b(bf16 ? size_t(n) : 0);
  const int64_t workers = std::clamp<int64_t>(std::thread::hardware_concurrency(), 1, 32);
  const int64_t per = (n + workers - 1) / workers;
  std::vector<std::thread> threads;
  for (int64_t w = 0; w < workers; ++w)
    threads.emplace_back([&, w] {
      for (int64_t e = w * per; e < std::min(n, (w + 1) * per); ++e) {
        if (bf16) b[size_t(e)] = f32_to_bf16(value(e));
        else f[size_t(e)] = value(e);
      }
    });
  for (std::thread& t : threads) t.join();
  into.copy_from_host(bf16 ? static_cast<const void*>(b.data()) : f.data(), into.nbytes());
}

}  // namespace

std::unique_ptr<Target> Target::random(const TargetSpec& s, std::vector<int64_t> layer_ids, int64_t max_seq_len,
                                       uint64_t seed, double std) {
  DF_CHECK(s.hidden_size > 0 && s.intermediate_size > 0 && s.num_hidden_layers > 0 && s.num_attention_heads > 0 &&
               s.num_key_value_heads > 0 && s.head_dim > 0 && s.head_dim % 2 == 0 && s.vocab_size > 0 &&
               s.num_attention_heads % s.num_key_value_heads == 0,
           "Target::random: every dim must be positive, head_dim even and the heads a multiple of the kv heads");
  DF_CHECK(std > 0 && std::isfinite(std), "Target::random: std " << std << " must be > 0");
  DF_CHECK(max_seq_len >= 1, "Target::random: max_seq_len " << max_seq_len << " must be >= 1");
  for (int64_t id : layer_ids)
    DF_CHECK(id >= 0 && id < s.num_hidden_layers, "Target::random: layer id " << id << " is outside [0, "
                                                                              << s.num_hidden_layers - 1 << "]");
  std::unique_ptr<Target> t(new Target());
  t->spec_ = s;
  t->spec_.tie_word_embeddings = false;
  t->layer_ids_ = std::move(layer_ids);
  t->max_seq_len_ = max_seq_len;
  // build() asks for the weights in one fixed order; each gets the next tensor index, so the
  // same seed gives the same weights. Norms (1-D) are 1.
  uint64_t index = 0;
  t->build("random target", [&](const std::string&, const Tensor& into) {
    const bool norm = into.ndim() == 1;
    fill_random(into, seed, index++, norm ? 0.0 : std, norm ? 1.0f : 0.0f);
  });
  return t;
}

}  // namespace dflash

// Target::random: a target at any dims with random weights generated in memory, in parallel, by a
// counter-based generator (splitmix64 of seed, tensor and element), so no file is written.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <thread>

#include "model/target.h"
#include "runtime/context.h"

namespace dflash {

namespace {

uint64_t splitmix64(uint64_t x) {
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

// A persistent tensor of `shape` in dtype: uniform values of standard deviation std (or all
// `constant` when std is 0), element e from splitmix64(seed, tensor, e).
Tensor random_tensor(const Shape& shape, DType dtype, uint64_t seed, uint64_t tensor, double std, float constant,
                     const std::string& name) {
  const int64_t n = shape.numel();
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
  return Tensor::from_host(shape, dtype, bf16 ? static_cast<const void*>(b.data()) : f.data(), name);
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
  const DType dt = Context::current().device().is_cuda() ? DType::bf16 : DType::f32;
  const int64_t H = s.hidden_size, I = s.intermediate_size, V = s.vocab_size, hd = s.head_dim;
  const int64_t q_out = s.num_attention_heads * hd, kv_out = s.num_key_value_heads * hd;
  uint64_t index = 0;
  auto weight = [&](const Shape& shape, const std::string& name) { return random_tensor(shape, dt, seed, index++, std, 0, name); };
  auto norm = [&](int64_t d, const std::string& name) { return random_tensor({d}, dt, seed, index++, 0, 1.0f, name); };
  t->embed_ = weight({V, H}, "random.embed_tokens");
  for (int64_t l = 0; l < s.num_hidden_layers; ++l) {
    Layer p;
    const std::string at = "random.layers." + std::to_string(l) + ".";
    p.input_norm = norm(H, at + "input_layernorm");
    p.post_norm = norm(H, at + "post_attention_layernorm");
    p.q = weight({q_out, H}, at + "q_proj");
    p.k = weight({kv_out, H}, at + "k_proj");
    p.v = weight({kv_out, H}, at + "v_proj");
    p.o = weight({H, q_out}, at + "o_proj");
    if (s.has_qk_norm()) {
      p.q_norm = norm(hd, at + "q_norm");
      p.k_norm = norm(hd, at + "k_norm");
    }
    p.gate = weight({I, H}, at + "gate_proj");
    p.up = weight({I, H}, at + "up_proj");
    p.down = weight({H, I}, at + "down_proj");
    t->layers_.push_back(std::move(p));
  }
  t->final_norm_ = norm(H, "random.norm");
  t->lm_head_ = weight({V, H}, "random.lm_head");
  std::vector<int32_t> iota(static_cast<size_t>(max_seq_len));
  std::iota(iota.begin(), iota.end(), 0);
  t->positions_ = Tensor::from_ints({max_seq_len}, iota, "target.positions");
  t->inv_freq_ = Tensor::from_floats({hd / 2}, rope_inv_freq(s), "target.inv_freq");
  return t;
}

}  // namespace dflash

// persistent_need: products and sums in uint64 with overflow checks; check_persistent_fit's message.
#include "train/memory_fit.h"

#include <algorithm>
#include <cstdio>
#include <initializer_list>

#include "runtime/error.h"

namespace dflash {

namespace {

using Bytes = std::optional<uint64_t>;

Bytes product(std::initializer_list<int64_t> factors) {
  uint64_t n = 1;
  for (int64_t f : factors) {
    if (f < 0 || __builtin_mul_overflow(n, uint64_t(f), &n)) return std::nullopt;
  }
  return n;
}

Bytes sum(std::initializer_list<Bytes> terms) {
  uint64_t n = 0;
  for (const Bytes& t : terms)
    if (!t || __builtin_add_overflow(n, *t, &n)) return std::nullopt;
  return n;
}

std::string text(const Bytes& b) {
  if (!b) return "more than 2^64 bytes (the product overflows)";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.3g GiB (%llu bytes)", double(*b) / double(1ull << 30), (unsigned long long)*b);
  return buf;
}

Bytes target_bytes(const TargetSpec& t, int64_t elem, int64_t max_seq) {
  const int64_t H = t.hidden_size, I = t.intermediate_size, hd = t.head_dim;
  const int64_t q = t.num_attention_heads * hd, kv = t.num_key_value_heads * hd;
  const Bytes layer = sum({product({2, H}), product({q, H}), product({2, kv, H}), product({H, q}),
                           product({t.has_qk_norm() ? 2 : 0, hd}), product({3, I, H})});
  const Bytes all_layers = layer ? product({int64_t(*layer), t.num_hidden_layers}) : std::nullopt;
  const Bytes elements = sum({product({t.tie_word_embeddings ? 1 : 2, t.vocab_size, H}), all_layers, product({H})});
  return sum({elements ? product({int64_t(*elements), elem}) : std::nullopt, product({max_seq, 4})});
}

}  // namespace

PersistentNeed persistent_need(const WorkerShape& w) {
  PersistentNeed need;
  const int64_t compute = w.cuda ? 2 : 4;
  int64_t max_seq = 0;
  for (const Bucket& b : w.buckets) max_seq = std::max(max_seq, b.seq);
  need.parts.push_back({"target weights", target_bytes(w.target, compute, max_seq)});

  int64_t params = 0;
  for (const ParamSpec& p : drafter_param_specs(w.drafter)) params += p.shape.numel();
  // f32 master and gradients always; a bf16 compute copy on a GPU; Adam m and v when training.
  need.parts.push_back({w.train ? "drafter parameters, gradients and Adam moments" : "drafter parameters and gradients",
                        product({params, 8 + (w.cuda ? 2 : 0) + (w.train ? 8 : 0)})});

  const int64_t FH = w.drafter.num_features() * w.drafter.hidden_size;
  for (const Bucket& b : w.buckets) {
    const int64_t B = b.batch, S = b.seq, N = b.anchors;
    // Static inputs: ids, mask (and the target's ids online) [B, S], anchors and keep [B, N], the
    // features [B, S, F*H]; each input also has a host staging copy (host memory on a GPU).
    const Bytes ints = sum({product({w.online ? 3 : 2, B, S, 4}), product({2, B, N, 4})});
    const Bytes features = product({B, S, FH, w.online ? compute : 4});
    const Bytes staging = sum({ints, w.online ? Bytes(0) : features});
    need.parts.push_back({"bucket " + b.str() + " static inputs" + (w.cuda ? "" : " and their staging"),
                          w.cuda ? sum({ints, features}) : sum({ints, features, staging})});
  }
  need.total = 0;
  for (const PersistentNeed::Part& p : need.parts) need.total = sum({need.total, p.bytes});
  return need;
}

void check_persistent_fit(const WorkerShape& w, uint64_t available, const std::string& device,
                          const std::string& available_source) {
  const PersistentNeed need = persistent_need(w);
  if (need.total && *need.total <= available) return;
  std::string parts;
  for (const PersistentNeed::Part& p : need.parts) parts += "\n  " + p.what + ": " + text(p.bytes);
  DF_FAIL("the bucket set does not fit on " << device << ": before any activation, each worker's persistent "
                                            << "tensors need at least " << text(need.total) << ", but only "
                                            << text(available) << " are available (" << available_source
                                            << "). Nothing was allocated. Per part:" << parts
                                            << "\nfix: lower the batch (or seq) of the largest buckets, use fewer "
                                            << "CPU workers, or use a device with more memory");
}

PersistentNeed generate_need(const GenerateShape& g) {
  PersistentNeed need;
  const TargetSpec& t = g.target;
  const int64_t compute = g.cuda ? 2 : 4;
  need.parts.push_back({"target weights", target_bytes(t, compute, 0)});
  need.parts.push_back({"KV caches (" + std::to_string(g.slots) + " slots x " + std::to_string(g.capacity) +
                            " positions x " + std::to_string(t.num_hidden_layers) + " layers)",
                        product({2, t.num_hidden_layers, g.slots, g.capacity, t.num_key_value_heads, t.head_dim,
                                 compute})});
  // The slot state, the step's result, and the prefill chunk's inputs and result, each with a host copy.
  need.parts.push_back({"static inputs and outputs and their host copies",
                        sum({product({2, 4, g.slots, 8 + 2}), product({2, 4, g.prefill_chunk, 3})})});
  need.total = 0;
  for (const PersistentNeed::Part& p : need.parts) need.total = sum({need.total, p.bytes});
  return need;
}

void check_generate_fit(const GenerateShape& g, uint64_t available, const std::string& device,
                        const std::string& available_source) {
  const PersistentNeed need = generate_need(g);
  if (need.total.has_value() && *need.total <= available) return;
  GenerateShape one = g, two = g;
  one.slots = 1;
  two.slots = 2;
  const Bytes fixed_and_slot = generate_need(one).total, two_slots = generate_need(two).total;
  std::string largest = "none: not even one slot of " + std::to_string(g.capacity) + " positions fits";
  if (fixed_and_slot && two_slots && *fixed_and_slot <= available) {
    const uint64_t per_slot = *two_slots - *fixed_and_slot, fixed = *fixed_and_slot - per_slot;
    largest = std::to_string((available - fixed) / per_slot);
  }
  std::string parts;
  for (const PersistentNeed::Part& p : need.parts) parts += "\n  " + p.what + ": " + text(p.bytes);
  DF_FAIL("generate: --batch " << g.slots << " does not fit on " << device << ": the target and the KV caches need "
                               << text(need.total) << ", but only " << text(available) << " are available ("
                               << available_source << "). Nothing was allocated. Per part:" << parts
                               << "\nthe largest batch that fits: " << largest
                               << "\nfix: lower --batch (generate.batch), or generate.max_length (each slot's "
                               << "positions; 0 sizes it to the longest prompt plus --max-new-tokens)");
}

}  // namespace dflash

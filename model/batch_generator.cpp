// BatchGenerator: the decode step and prefill chunk programs (bodies recorded at startup) and the
// host loop of continuous batching over fixed slots.
#include "model/batch_generator.h"

#include <algorithm>
#include <numeric>

#include "model/generate_ops.h"
#include "model/prompt_check.h"
#include "model/spec_ops.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/decode_ops.h"
#include "runtime/ops.h"

namespace dflash {

namespace f = generate::slot_field;
using generate::kGenerateSlotFields;

void check_generate_request(const std::vector<int32_t>& prompt, int64_t max_new, int64_t vocab, int64_t capacity,
                            int64_t max_positions, const std::string& where) {
  check_prompt(prompt, max_new, vocab, capacity, max_positions, where,
               {.empty = "prompt_ids is empty; fix: give every request at least one token (the chat template "
                         "applied), or drop the line",
                .token = "prompt_ids holds ",
                .outside = ", outside",
                .max_new = "--max-new-tokens",
                .capacity = " of each slot's KV cache; fix: raise generate.max_length (0 sizes it to the longest "
                            "prompt), shorten the prompt or lower --max-new-tokens"});
}

BatchGenerator::BatchGenerator(Device device, const Target& target, const GenerateOptions& o, size_t available_bytes)
    : opt_(o), target_(target), ctx_(std::make_unique<Context>(device)) {
  DF_CHECK(o.slots >= 1, "BatchGenerator: " << o.slots << " slots; it needs at least 1");
  DF_CHECK(o.capacity >= 2, "BatchGenerator: capacity " << o.capacity << " must be >= 2 (prompt + max_new_tokens)");
  DF_CHECK(o.prefill_chunk >= 1, "BatchGenerator: prefill_chunk " << o.prefill_chunk << " must be >= 1");
  DF_CHECK(o.temperature >= 0 && o.top_p > 0 && o.top_p <= 1 && o.top_k >= 0,
           "BatchGenerator: temperature " << o.temperature << ", top_p " << o.top_p << ", top_k " << o.top_k
                                          << ": temperature must be >= 0, top_p in (0, 1], top_k >= 0");
  if (!o.slot_order.empty()) {
    std::vector<int64_t> sorted = o.slot_order;
    std::sort(sorted.begin(), sorted.end());
    std::vector<int64_t> all(size_t(o.slots));
    std::iota(all.begin(), all.end(), 0);
    DF_CHECK(sorted == all, "BatchGenerator: slot_order must list every slot 0.." << o.slots - 1 << " once");
  }
  ContextScope scope(*ctx_);
  const int64_t S = o.slots, P = o.prefill_chunk;
  dec_ = std::make_unique<SlotTargetDecoder>(target, S, o.capacity);
  state_ = Tensor::persistent({S, kGenerateSlotFields}, DType::i32, "generate.state");
  std::vector<int32_t> iota(static_cast<size_t>(S));
  std::iota(iota.begin(), iota.end(), 0);
  slot_iota_ = Tensor::persistent({S}, DType::i32, "generate.slot_iota");
  slot_iota_.copy_from_host(iota.data(), iota.size() * sizeof(int32_t));
  host_state_.assign(size_t(S * kGenerateSlotFields), 0);
  write_state();
  chunk_ids_ = prefill_io_.input("chunk_ids", {P}, DType::i32);
  chunk_slot_ = prefill_io_.input("chunk_slot", {P}, DType::i32);
  chunk_pos_ = prefill_io_.input("chunk_pos", {P}, DType::i32);
  chunk_ends_ = prefill_io_.input("chunk_ends", {S}, DType::i32);  // at most one prompt per slot ends in a chunk
  prefill_result_ = prefill_io_.output("prefill_result", {S}, DType::i32);
  step_result_ = step_io_.output("step_result", {S}, DType::i32);
  if (!o.graphs) return;
  engine_ = std::make_unique<Engine>(*ctx_);
  engine_->add("generate/prefill", Bucket{P, 0, 1}, [this](bool) { prefill_body(); }, false);
  engine_->add("generate/step", Bucket{1, 0, S}, [this](bool) { step_body(); }, false);
  ProfileLog* const labels = o.profile;  // the programs' kernels labelled for a profile
  ctx_->attach_profile(labels);
  ctx_->set_gemm_tuning(o.gemm_tuning && device.is_cuda());
  engine_->build(available_bytes);
  ctx_->attach_profile(nullptr);
  prefill_ = &engine_->program("generate/prefill");
  step_ = &engine_->program("generate/step");
}

BatchGenerator::~BatchGenerator() {
  ContextScope scope(*ctx_);
  engine_.reset();
  prefill_io_ = step_io_ = StaticIO();
  state_ = slot_iota_ = chunk_ids_ = chunk_slot_ = chunk_pos_ = chunk_ends_ = prefill_result_ = step_result_ = Tensor();
  dec_.reset();
}

// Greedy: the first maximum of each row. Sampled: a draw from the sampling distribution with the
// entry's slot's stream.
Tensor BatchGenerator::choose(const Tensor& logits, const Tensor& entry_slot, const Tensor& entry_pos) const {
  if (!sampled()) return ops::argmax_rows(logits).index;
  spec::SamplingParams s;
  s.temperature = opt_.temperature;
  s.top_p = opt_.ignore_top_p ? 1.0f : opt_.top_p;
  s.top_k = opt_.top_k;
  return generate::sample(state_, spec::sampling_probs(logits, s), {entry_slot, entry_pos});
}

// One prefill chunk: the target over the staged rows (each with its slot and position; -1 pads),
// then for each prompt that ends in the chunk its first new token, committed to its slot.
void BatchGenerator::prefill_body() const {
  NoGrad no_grad;
  prefill_io_.stage_in();
  const Tensor hidden = dec_->pass(chunk_ids_, chunk_slot_, chunk_pos_);                       // (P, H)
  const generate::Entries e = generate::entries(chunk_ends_, chunk_slot_, chunk_pos_);
  const Tensor last = ops::gather_rows(hidden, chunk_ends_);                                   // (S, H)
  const Tensor logits = ops::linear_rowwise(last, target_.lm_head(), DType::f32);               // (S, V)
  generate::commit(state_, e, choose(logits, e.slot, e.pos), prefill_result_);
  prefill_io_.stage_out();
}

// One decode step: every active slot's token at its length, one new token each.
void BatchGenerator::step_body() const {
  NoGrad no_grad;
  const generate::StepRows rows = generate::step_rows(state_);
  const Tensor hidden = dec_->pass(rows.ids, slot_iota_, rows.pos);                     // (S, H)
  const Tensor logits = ops::linear_rowwise(hidden, target_.lm_head(), DType::f32);     // (S, V)
  const generate::Entries e{slot_iota_, rows.pos};
  generate::commit(state_, e, choose(logits, e.slot, e.pos), step_result_);
  step_io_.stage_out();
}

void BatchGenerator::write_state() { state_.copy_from_host(host_state_.data(), host_state_.size() * sizeof(int32_t)); }

std::vector<int32_t> BatchGenerator::prefill(const std::vector<std::pair<int64_t, const GenerateRequest*>>& entering) {
  const int64_t P = opt_.prefill_chunk, S = opt_.slots;
  std::vector<int32_t> ids(static_cast<size_t>(P)), slot(ids), pos(ids), ends(static_cast<size_t>(S)), result(ends);
  std::vector<int32_t> first(entering.size(), -1);
  size_t prompt = 0;
  int64_t at = 0;  // the next prompt position of entering[prompt]
  while (prompt < entering.size()) {
    std::fill(ids.begin(), ids.end(), 0);
    std::fill(slot.begin(), slot.end(), -1);
    std::fill(pos.begin(), pos.end(), -1);
    std::fill(ends.begin(), ends.end(), -1);
    std::vector<size_t> ending;  // entering indices whose prompt ends in this chunk, in entry order
    int64_t row = 0;
    while (row < P && prompt < entering.size()) {
      const auto& [s, request] = entering[prompt];
      const int64_t n = int64_t(request->prompt.size());
      const int64_t take = std::min(P - row, n - at);
      for (int64_t i = 0; i < take; ++i) {
        ids[size_t(row + i)] = request->prompt[size_t(at + i)];
        slot[size_t(row + i)] = int32_t(s);
        pos[size_t(row + i)] = int32_t(at + i);
      }
      row += take;
      at += take;
      if (at == n) {
        ends[ending.size()] = int32_t(row - 1);
        ending.push_back(prompt);
        ++prompt;
        at = 0;
      }
    }
    prefill_io_.staging("chunk_ids").copy_from_host(ids.data(), ids.size() * sizeof(int32_t));
    prefill_io_.staging("chunk_slot").copy_from_host(slot.data(), slot.size() * sizeof(int32_t));
    prefill_io_.staging("chunk_pos").copy_from_host(pos.data(), pos.size() * sizeof(int32_t));
    prefill_io_.staging("chunk_ends").copy_from_host(ends.data(), ends.size() * sizeof(int32_t));
    if (opt_.graphs) prefill_->replay();
    else prefill_body();
    ctx_->synchronize();
    prefill_io_.result("prefill_result").copy_to_host(result.data(), result.size() * sizeof(int32_t));
    for (size_t e = 0; e < ending.size(); ++e) first[ending[e]] = result[e];
  }
  return first;
}

void BatchGenerator::run(const std::vector<GenerateRequest>& requests, const std::vector<int32_t>& stop_ids,
                         const std::function<void(const GenerateResult&)>& done,
                         const std::function<void(int64_t)>& step) {
  const TargetSpec& ts = target_.spec();
  for (size_t i = 0; i < requests.size(); ++i)
    check_generate_request(requests[i].prompt, requests[i].max_new, ts.vocab_size, opt_.capacity,
                           ts.max_position_embeddings, "request " + std::to_string(i));
  ContextScope scope(*ctx_);
  const int64_t S = opt_.slots;
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  std::vector<int64_t> order = opt_.slot_order;
  if (order.empty()) {
    order.resize(size_t(S));
    std::iota(order.begin(), order.end(), 0);
  }
  struct Held {
    int64_t request = -1;  // -1: free
    std::vector<int32_t> output;
  };
  std::vector<Held> held(static_cast<size_t>(S));
  int32_t* state = host_state_.data();
  auto field = [&](int64_t s, int f) -> int32_t& { return state[s * kGenerateSlotFields + f]; };
  // Appends t to slot s's output; a stop id or the budget ends the request and frees the slot.
  auto take = [&](int64_t s, int32_t t) {
    Held& h = held[size_t(s)];
    h.output.push_back(t);
    const GenerateRequest& r = requests[size_t(h.request)];
    const bool stopped = is_stop(t);
    if (!stopped && int64_t(h.output.size()) < r.max_new) return false;
    done(GenerateResult{size_t(h.request), std::move(h.output), stopped, s});
    h = Held();
    field(s, f::active) = 0;
    return true;
  };
  // Every slot starts free, whatever an earlier run (or a timing fill) left in the state.
  for (int64_t s = 0; s < S; ++s) field(s, f::active) = 0;
  write_state();
  size_t next = 0;
  int64_t active = 0;
  while (true) {
    // Free slots take the next requests; a request may finish at its first token, freeing its slot again.
    bool dirty = false;
    while (next < requests.size()) {
      std::vector<std::pair<int64_t, const GenerateRequest*>> entering;
      for (int64_t s : order)
        if (held[size_t(s)].request < 0 && next < requests.size()) {
          const GenerateRequest& r = requests[next];
          held[size_t(s)].request = int64_t(next++);
          field(s, f::active) = 0;
          field(s, f::length) = 0;
          field(s, f::key_lo) = int32_t(uint32_t(r.key));
          field(s, f::key_hi) = int32_t(uint32_t(r.key >> 32));
          entering.push_back({s, &r});
        }
      if (entering.empty()) break;
      write_state();
      const std::vector<int32_t> first = prefill(entering);
      for (size_t e = 0; e < entering.size(); ++e) {
        const int64_t s = entering[e].first;
        DF_CHECK(first[e] >= 0 && first[e] < ts.vocab_size,
                 "BatchGenerator: the prefill of slot " << s << " returned token " << first[e]
                                                        << "; this is a bug, please report it");
        field(s, f::active) = 1;  // as the device's commit: length = prompt, token = first
        field(s, f::length) = int32_t(entering[e].second->prompt.size());
        field(s, f::token) = first[e];
        ++active;
        if (take(s, first[e])) {
          --active;
          dirty = true;
        }
      }
    }
    if (dirty) write_state();
    if (active == 0) break;
    if (opt_.graphs) step_->replay();
    else step_body();
    ctx_->synchronize();
    std::vector<int32_t> result(static_cast<size_t>(S));
    step_io_.result("step_result").copy_to_host(result.data(), result.size() * sizeof(int32_t));
    dirty = false;
    int64_t produced = 0;
    for (int64_t s = 0; s < S; ++s) {
      if (held[size_t(s)].request < 0 || field(s, f::active) == 0) continue;
      DF_CHECK(result[size_t(s)] >= 0 && result[size_t(s)] < ts.vocab_size,
               "BatchGenerator: slot " << s << " returned token " << result[size_t(s)]
                                       << " although it is active; this is a bug, please report it");
      field(s, f::token) = result[size_t(s)];  // as the device's commit
      field(s, f::length) += 1;
      ++produced;
      if (take(s, result[size_t(s)])) {
        --active;
        dirty = true;
      }
    }
    if (dirty) write_state();
    if (step) step(produced);
  }
}

void BatchGenerator::replay_step(bool wait) {
  ContextScope scope(*ctx_);
  if (opt_.graphs) step_->replay();
  else step_body();
  if (wait) ctx_->synchronize();
}

void BatchGenerator::fill_slots_for_timing(int64_t length) {
  DF_CHECK(length >= 0 && length < opt_.capacity,
           "BatchGenerator::fill_slots_for_timing: length " << length << " is outside [0, " << opt_.capacity << ")");
  ContextScope scope(*ctx_);
  for (int64_t s = 0; s < opt_.slots; ++s) {
    int32_t* slot = host_state_.data() + s * kGenerateSlotFields;
    slot[f::active] = 1;
    slot[f::length] = int32_t(length);
    slot[f::token] = 0;
  }
  write_state();
}

}  // namespace dflash

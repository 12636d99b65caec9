// SpecDecoder: the decode programs (bodies recorded at startup) and the host loop of one prompt.
#include "model/spec_decoder.h"

#include <algorithm>
#include <chrono>
#include <cstring>

#include "model/prompt_check.h"
#include "model/spec_ops.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/decode_ops.h"
#include "runtime/ops.h"

namespace dflash {

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }
float from_bits(int32_t b) {
  float f;
  std::memcpy(&f, &b, sizeof f);
  return f;
}
}  // namespace

void check_decode_prompt(const std::vector<int32_t>& prompt, int64_t max_new, int64_t vocab, int64_t max_len,
                         int64_t max_positions, const std::string& where) {
  check_prompt(prompt, max_new, vocab, max_len, max_positions, where,
               {.empty = "the prompt is empty; decoding needs at least one token",
                .token = "token ",
                .outside = " is outside",
                .max_new = "max_new_tokens",
                .capacity = " the decoder's KV caches were recorded for; fix: shorten the prompt, lower "
                            "max_new_tokens, or build the decoder for longer prompts"});
}

int64_t round_produced(const std::vector<int32_t>& committed, int64_t budget, const std::vector<int32_t>& stop_ids,
                       bool* stopped) {
  const int64_t n = std::min(int64_t(committed.size()), budget);
  for (int64_t k = 0; k < n; ++k)
    if (std::find(stop_ids.begin(), stop_ids.end(), committed[size_t(k)]) != stop_ids.end()) {
      *stopped = true;
      return k + 1;
    }
  return n;
}

SpecDecoder::SpecDecoder(Device device, const Target& target, const Drafter* drafter, const SpecDecoderOptions& o)
    : opt_(o), target_(target), drafter_(drafter), ctx_(std::make_unique<Context>(device)) {
  DF_CHECK(o.max_len >= 1, "SpecDecoder: max_len " << o.max_len << " must be >= 1 (prompt + max_new_tokens)");
  DF_CHECK(o.prefill_chunk >= 1, "SpecDecoder: prefill_chunk " << o.prefill_chunk << " must be >= 1");
  DF_CHECK(o.temperature >= 0 && o.top_p > 0 && o.top_p <= 1 && o.top_k >= 0,
           "SpecDecoder: temperature " << o.temperature << ", top_p " << o.top_p << ", top_k " << o.top_k
                                       << ": temperature must be >= 0, top_p in (0, 1], top_k >= 0");
  const TargetSpec& ts = target.spec();
  if (drafter) {
    const DrafterSpec& ds = drafter->spec();
    DF_CHECK(ds.hidden_size == ts.hidden_size && ds.vocab_size == ts.vocab_size &&
                 ds.num_target_layers == ts.num_hidden_layers && ds.target_layer_ids == target.layer_ids(),
             "SpecDecoder: the drafter (hidden " << ds.hidden_size << ", vocab " << ds.vocab_size << ", "
                                                 << ds.num_target_layers << " target layers) does not fit the target "
                                                 << "(hidden " << ts.hidden_size << ", vocab " << ts.vocab_size << ", "
                                                 << ts.num_hidden_layers
                                                 << " layers), or the target was built with other layer ids");
  }
  ContextScope scope(*ctx_);
  const int64_t bs = block_size(), P = o.prefill_chunk;
  target_dec_ = std::make_unique<TargetDecoder>(target, o.max_len + bs);
  state_ = Tensor::persistent({spec::kSpecStateFields}, DType::i32, "spec.state");
  chunk_ids_ = prefill_io_.input("chunk_ids", {P}, DType::i32);
  chunk_ctl_ = prefill_io_.input("chunk_ctl", {2}, DType::i32);  // {count, count - 1}
  prefill_result_ = prefill_io_.output("prefill_result", {spec::kSpecTokenResult}, DType::i32);
  step_result_ = step_io_.output("step_result", {spec::kSpecTokenResult}, DType::i32);
  if (drafter) {
    drafter_dec_ = std::make_unique<DrafterDecoder>(*drafter, target.embed_tokens(), o.max_len);
    const DrafterSpec& ds = drafter->spec();
    block_ = Tensor::persistent({bs}, DType::i32, "spec.block");
    pending_features_ = Tensor::persistent({bs, ds.num_features() * ds.hidden_size}, target.embed_tokens().dtype(),
                                           "spec.pending_features");
    round_result_ = verify_io_.output("round_result", {spec::kSpecRoundHeader + bs}, DType::i32);
    if (o.draft_logits) draft_logits_ = draft_io_.output("draft_logits", {bs, ts.vocab_size}, DType::f32);
    if (o.temperature > 0) draft_probs_ = Tensor::persistent({bs, ts.vocab_size}, DType::f32, "spec.draft_probs");
  }
  if (!o.graphs) return;
  engine_ = std::make_unique<Engine>(*ctx_);
  engine_->add("spec/prefill", Bucket{P, 0, 1}, [this](bool) { prefill_body(); }, false);
  if (drafter) {
    engine_->add("spec/draft", Bucket{bs, 1, 1}, [this, bs](bool) { draft_body(bs); }, false);
    for (int64_t L = 2; L < bs; ++L)
      engine_->add("spec/draft-" + std::to_string(L), Bucket{L, 1, 1}, [this, L](bool) { draft_body(L); }, false);
    engine_->add("spec/verify", Bucket{bs, 0, 1}, [this](bool) { verify_body(); }, false);
  }
  engine_->add("spec/step", Bucket{1, 0, 1}, [this](bool) { step_body(); }, false);
  ctx_->attach_profile(o.profile);
  engine_->build(available_memory_bytes(device));
  ctx_->attach_profile(nullptr);
  prefill_ = &engine_->program("spec/prefill");
  step_ = &engine_->program("spec/step");
  if (drafter) {
    draft_ = &engine_->program("spec/draft");
    verify_ = &engine_->program("spec/verify");
    short_drafts_.assign(size_t(bs), nullptr);
    for (int64_t L = 2; L < bs; ++L) short_drafts_[size_t(L)] = &engine_->program("spec/draft-" + std::to_string(L));
  }
}

SpecDecoder::~SpecDecoder() {
  ContextScope scope(*ctx_);
  engine_.reset();
  prefill_io_ = draft_io_ = verify_io_ = step_io_ = StaticIO();
  state_ = chunk_ids_ = chunk_ctl_ = block_ = pending_features_ = Tensor();
  prefill_result_ = round_result_ = step_result_ = draft_logits_ = Tensor();
  drafter_dec_.reset();
  target_dec_.reset();
}

int64_t SpecDecoder::block_size() const { return drafter_ ? drafter_->spec().block_size : 1; }

Tensor SpecDecoder::field(int f) const { return spec::state_field(state_, f); }

// One prefill chunk: the target over the staged ids (the first chunk_count are real), the
// features appended to the drafter's context, and the last real row's argmax committed.
void SpecDecoder::prefill_body() const {
  NoGrad no_grad;
  prefill_io_.stage_in();
  ops::copy_(state_.rows(spec::field::chunk_count, spec::field::chunk_count + 2), chunk_ctl_);
  const Tensor len = field(spec::field::target_len), count = field(spec::field::chunk_count);
  TargetDecoder::Pass pass = target_dec_->pass(chunk_ids_, len, count, drafter_dec_ != nullptr);
  if (drafter_dec_) drafter_dec_->append_context(pass.features, len, count);
  Tensor last = Tensor::empty({1, pass.hidden.dim(1)}, pass.hidden.dtype());  // (1, H)
  ops::copy_rows_(last, Tensor(), pass.hidden, field(spec::field::chunk_last), 1, Tensor());
  Tensor logits = ops::linear_rowwise(last, target_.lm_head(), DType::f32);  // (1, V)
  ops::ArgmaxRows best = ops::argmax_rows(logits);
  if (sampled())  // position target_len + chunk_count: the token after the chunk
    spec::sample(state_, spec::field::target_len, spec::field::chunk_count, 0, spec::sampling_probs(logits, sampling()),
                 spec::SamplePurpose::sample_token, best.index);
  spec::prefill_commit(state_, best, prefill_result_);
  prefill_io_.stage_out();
}

// The drafter's pass over one block: the last round's accepted positions become context, then
// block = [token, mask...] is drafted and its slots 1..L-1 filled with the drafter's argmax (a
// block of `length` L <= bs tokens; slots L.. keep the mask id, and the host ignores them).
void SpecDecoder::draft_body(int64_t length) const {
  NoGrad no_grad;
  const int64_t bs = block_size();
  spec::make_block(state_, int32_t(drafter_->spec().mask_token_id), block_);
  drafter_dec_->append_context(pending_features_, field(spec::field::ctx_at), field(spec::field::ctx_count));
  const Tensor block = length == bs ? block_ : block_.rows(0, length);
  Tensor out = drafter_dec_->block(block, field(spec::field::start));              // (L, H)
  Tensor logits = ops::linear_rowwise(out, target_.lm_head(), DType::f32);           // (L, V)
  if (draft_logits_.defined() && length == bs) ops::copy_(draft_logits_, logits);
  if (sampled()) {  // slot k's draft drawn at position start + k; the probabilities kept for the verify
    Tensor q = draft_probs_.rows(0, length);
    ops::copy_(q, spec::sampling_probs(logits, sampling()));
    Tensor drafted = Tensor::empty({length}, DType::i32);
    spec::sample(state_, spec::field::start, spec::field::zero, 0, q, spec::SamplePurpose::sample_draft, drafted);
    spec::fill_block(drafted, block);
  } else {
    spec::fill_block(ops::argmax_rows(logits).index, block);
  }
  draft_io_.stage_out();
}

// The target's causal pass over the block on top of its cache, then acceptance and rollback.
void SpecDecoder::verify_body() const {
  NoGrad no_grad;
  TargetDecoder::Pass pass = target_dec_->pass(block_, field(spec::field::target_len), Tensor(), true);
  ops::copy_(pending_features_, pass.features);
  Tensor logits = ops::linear_rowwise(pass.hidden, target_.lm_head(), DType::f32);  // (bs, V)
  if (sampled())
    spec::accept_sampled(state_, block_, spec::sampling_probs(logits, sampling()), draft_probs_, opt_.rollback_bias,
                         opt_.accept_all_drafts, round_result_);
  else
    spec::accept(state_, block_, ops::argmax_rows(logits).index, opt_.rollback_bias, round_result_);
  verify_io_.stage_out();
}

// The target alone: one token at position target_len.
void SpecDecoder::step_body() const {
  NoGrad no_grad;
  TargetDecoder::Pass pass = target_dec_->pass(field(spec::field::token), field(spec::field::target_len), Tensor(), false);
  Tensor logits = ops::linear_rowwise(pass.hidden, target_.lm_head(), DType::f32);  // (1, V)
  ops::ArgmaxRows best = ops::argmax_rows(logits);
  if (sampled())  // the token after position target_len
    spec::sample(state_, spec::field::target_len, spec::field::zero, 1, spec::sampling_probs(logits, sampling()),
                 spec::SamplePurpose::sample_token, best.index);
  spec::step_commit(state_, best, step_result_);
  step_io_.stage_out();
}

kernels::cpu::SamplingParams SpecDecoder::sampling() const {
  kernels::cpu::SamplingParams s;
  s.temperature = opt_.temperature;
  s.top_p = opt_.top_p;
  s.top_k = opt_.top_k;
  return s;
}

template <class Body>
void SpecDecoder::run(const Program* program, const Body& body) {
  if (opt_.graphs) program->replay();
  else body();
}

Decoded SpecDecoder::decode(const std::vector<int32_t>& prompt, int64_t max_new, const std::vector<int32_t>& stop_ids,
                            bool with_drafter, uint64_t sample_key) {
  DF_CHECK(!with_drafter || drafter_, "SpecDecoder::decode: this decoder was built without a drafter");
  const TargetSpec& ts = target_.spec();
  check_decode_prompt(prompt, max_new, ts.vocab_size, opt_.max_len, ts.max_position_embeddings, "decode");
  ContextScope scope(*ctx_);
  const int64_t n = int64_t(prompt.size()), P = opt_.prefill_chunk, bs = block_size(), end = n + max_new;
  auto is_stop = [&](int32_t t) { return std::find(stop_ids.begin(), stop_ids.end(), t) != stop_ids.end(); };
  Decoded d;

  // Prefill, chunk by chunk (each replay reads the staging buffers, so it finishes before the next
  // chunk is staged).
  const auto t0 = Clock::now();
  std::vector<int32_t> fresh(spec::kSpecStateFields, 0), ids(static_cast<size_t>(P)), ctl(2);
  fresh[spec::field::key_lo] = int32_t(uint32_t(sample_key));
  fresh[spec::field::key_hi] = int32_t(uint32_t(sample_key >> 32));
  fresh[spec::field::end] = int32_t(end);
  state_.copy_from_host(fresh.data(), fresh.size() * sizeof(int32_t));
  for (int64_t c0 = 0; c0 < n; c0 += P) {
    const int64_t c = std::min(P, n - c0);
    std::fill(ids.begin(), ids.end(), 0);
    std::copy(prompt.begin() + c0, prompt.begin() + c0 + c, ids.begin());
    ctl = {int32_t(c), int32_t(c - 1)};
    prefill_io_.staging("chunk_ids").copy_from_host(ids.data(), ids.size() * sizeof(int32_t));
    prefill_io_.staging("chunk_ctl").copy_from_host(ctl.data(), ctl.size() * sizeof(int32_t));
    run(prefill_, [this] { prefill_body(); });
    ctx_->synchronize();
  }
  int32_t head[spec::kSpecTokenResult];
  prefill_io_.result("prefill_result").copy_to_host(head, sizeof head);
  d.output = prompt;
  d.output.push_back(head[0]);
  d.prefill_s = seconds_since(t0);

  const auto t1 = Clock::now();
  if (with_drafter) {
    std::vector<int32_t> r(size_t(spec::kSpecRoundHeader + bs));
    int64_t start = n;
    bool stopped = is_stop(head[0]);
    while (start + 1 < end && !stopped) {
      // The verify pass always covers bs slots: it is causal, so slots < L see only the block's
      // first L tokens, and the host counts no more than L - 1 drafts.
      const int64_t length = std::min(bs, end - start);
      const Program* draft = length < bs && opt_.graphs ? short_drafts_[size_t(length)] : draft_;
      run(draft, [this, length] { draft_body(length); });
      run(verify_, [this] { verify_body(); });
      ctx_->synchronize();
      verify_io_.result("round_result").copy_to_host(r.data(), r.size() * sizeof(int32_t));
      if (opt_.draft_logits && d.rounds.empty()) d.first_logits = draft_io_.result("draft_logits").to_floats();
      const int32_t a = r[0], bonus = r[1];
      const int32_t* block = r.data() + spec::kSpecRoundHeader;
      DF_CHECK(a >= 0 && a < bs && block[0] == d.output[size_t(start)],
               "SpecDecoder: the device state disagrees with the host's (a = " << a << ", block[0] = " << block[0]
                                                                              << ", out[" << start << "] = "
                                                                              << d.output[size_t(start)]
                                                                              << "); this is a bug, please report it");
      // A short block's slots from L on are not drafts: a counts at most L - 1 of them. Whenever
      // the device's a + 1 differs from what is produced, decoding ends with this round, so the
      // device state (advanced by a + 1) is never used again.
      const int64_t accepted = std::min<int64_t>(a, length - 1) + 1;
      // (A capped a means every draft of the short block was accepted; the budget then ends before
      // the bonus, which is not needed.)
      std::vector<int32_t> committed(block + 1, block + accepted);  // the accepted drafts, then the bonus
      if (accepted == a + 1) committed.push_back(bonus);
      const int64_t produced = round_produced(committed, end - start - 1, stop_ids, &stopped);
      d.rounds.push_back({start, std::vector<int32_t>(block + 1, block + length), accepted, produced});
      d.output.insert(d.output.end(), committed.begin(), committed.begin() + produced);
      start += produced;
      ++d.passes;
    }
  } else {
    d.margins.push_back(from_bits(head[1]));
    d.logits.push_back(from_bits(head[2]));
    int32_t step[spec::kSpecTokenResult];
    while (int64_t(d.output.size()) < end && !is_stop(d.output.back())) {
      run(step_, [this] { step_body(); });
      ctx_->synchronize();
      step_io_.result("step_result").copy_to_host(step, sizeof step);
      d.output.push_back(step[0]);
      d.margins.push_back(from_bits(step[1]));
      d.logits.push_back(from_bits(step[2]));
      ++d.passes;
    }
  }
  d.decode_s = seconds_since(t1);
  for (size_t i = size_t(n); i < d.output.size(); ++i)
    if (is_stop(d.output[i])) {
      d.output.resize(i + 1);
      break;
    }
  if (!with_drafter) {
    d.margins.resize(d.output.size() - size_t(n));
    d.logits.resize(d.margins.size());
  }
  return d;
}

void SpecDecoder::replay_round() {
  DF_CHECK(drafter_, "SpecDecoder::replay_round: this decoder was built without a drafter");
  ContextScope scope(*ctx_);
  run(draft_, [this] { draft_body(block_size()); });
  run(verify_, [this] { verify_body(); });
  ctx_->synchronize();
}

void SpecDecoder::set_position(int64_t position) {
  DF_CHECK(position >= 1 && position + block_size() <= opt_.max_len,
           "SpecDecoder::set_position: " << position << " leaves no room for a block of " << block_size()
                                         << " in the recorded capacity " << opt_.max_len);
  ContextScope scope(*ctx_);
  std::vector<int32_t> s(spec::kSpecStateFields, 0);
  s[spec::field::start] = s[spec::field::target_len] = int32_t(position);
  s[spec::field::ctx_at] = int32_t(position - 1);
  s[spec::field::ctx_count] = 1;
  state_.copy_from_host(s.data(), s.size() * sizeof(int32_t));
}

void SpecDecoder::replay_draft() {
  DF_CHECK(drafter_, "SpecDecoder::replay_draft: this decoder was built without a drafter");
  ContextScope scope(*ctx_);
  run(draft_, [this] { draft_body(block_size()); });
  ctx_->synchronize();
}

void SpecDecoder::replay_step(bool wait) {
  ContextScope scope(*ctx_);
  run(step_, [this] { step_body(); });
  if (wait) ctx_->synchronize();
}

}  // namespace dflash

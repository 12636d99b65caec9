// SpecMonitor: per-replica decoders and the measurement split across them.
#include "train/spec_monitor.h"

#include <algorithm>
#include <exception>
#include <thread>

#include "model/target.h"

namespace dflash {

SpecMonitor::SpecMonitor(const Config& cfg, const std::vector<Replica*>& replicas,
                         const std::function<void(const std::string&)>& log) {
  DF_CHECK(!replicas.empty(), "SpecMonitor: no replicas");
  const EvalConfig& e = cfg.eval;
  const Target& target = replicas[0]->target();
  const TargetSpec& ts = target.spec();
  prompts_ = read_spec_prompts(e.spec_prompts);
  max_new_ = e.spec_max_new_tokens;
  std::string stop_source;
  stop_ids_ = spec_stop_ids(e, cfg.target.path, ts.vocab_size, &stop_source);
  int64_t longest = 0;
  for (const SpecPrompt& p : prompts_) longest = std::max(longest, int64_t(p.ids.size()));
  SpecDecoderOptions o;
  o.max_len = longest + max_new_;
  o.prefill_chunk = e.spec_prefill_chunk;
  o.graphs = cfg.runtime.graphs;
  apply_spec_sampling(e, o);
  seed_ = e.spec_seed;
  for (const SpecPrompt& p : prompts_)
    check_decode_prompt(p.ids, max_new_, ts.vocab_size, o.max_len, ts.max_position_embeddings,
                        "eval.spec_prompts " + p.where);
  for (Replica* r : replicas)
    decoders_.push_back(std::make_unique<SpecDecoder>(r->options().device, r->target(), &r->drafter(), o));
  block_size_ = replicas[0]->drafter().spec().block_size;
  log("spec_tau: " + std::to_string(prompts_.size()) + " prompts from " + e.spec_prompts.string() + " split over " +
      std::to_string(replicas.size()) + " worker(s), max_new_tokens " + std::to_string(max_new_) + ", stop ids: " +
      (stop_ids_.empty() ? stop_source : std::to_string(stop_ids_.size()) + " (" + stop_source + ")") +
      "; measured " + (e.spec_every > 0 ? "every " + std::to_string(e.spec_every) + " steps and " : "") +
      "before and after training");
}

SpecMonitor::~SpecMonitor() = default;

SpecFigures SpecMonitor::measure() {
  const size_t W = decoders_.size();
  std::vector<SpecPromptResult> results(prompts_.size());
  std::vector<std::exception_ptr> errors(W);
  auto share = [&](size_t w) {
    try {
      for (size_t i = w; i < prompts_.size(); i += W)
        results[i] = measure_spec_prompt(*decoders_[w], prompts_[i], max_new_, stop_ids_, false, true,
                                         spec_sample_key(seed_, i));
    } catch (...) {
      errors[w] = std::current_exception();
    }
  };
  if (W == 1) {
    share(0);
  } else {
    std::vector<std::thread> threads;
    for (size_t w = 0; w < W; ++w) threads.emplace_back(share, w);
    for (std::thread& t : threads) t.join();
  }
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
  return summarize_spec(results, block_size_);
}

}  // namespace dflash

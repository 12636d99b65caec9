// Prompts, stop ids, one prompt's decoding with the lossless check, and the figures.
#include "train/spec_eval.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "model/stop_tokens.h"
#include "runtime/splitmix.h"
#include "runtime/error.h"
#include "train/jsonl_lines.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

std::vector<SpecPrompt> read_spec_prompts(const fs::path& file) {
  const std::string fix = "fix: write one {\"input_ids\": [...]} per line";
  std::vector<SpecPrompt> out;
  read_json_lines(file, "prompts file", fix, [&](const json& j, const std::string& where) {
    DF_CHECK(j.is_object() && j.contains("input_ids") && j["input_ids"].is_array(),
             where << ": no \"input_ids\" array; " << fix);
    SpecPrompt p{{}, where};
    for (const json& v : j["input_ids"]) {
      DF_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() <= INT32_MAX,
               where << ": input_ids holds " << v.dump() << ", not a token id (an integer >= 0)");
      p.ids.push_back(int32_t(v.get<int64_t>()));
    }
    if (j.contains("loss_mask")) {  // a training-data line: its prompt is the part before the response
      const json& mask = j["loss_mask"];
      DF_CHECK(mask.is_array() && mask.size() == p.ids.size(),
               where << ": loss_mask must be an array as long as input_ids (" << p.ids.size() << ")");
      size_t cut = 0;
      while (cut < mask.size() && !(mask[cut].is_number() && mask[cut].get<double>() == 1.0)) ++cut;
      p.ids.resize(cut);
    }
    out.push_back(std::move(p));
  });
  DF_CHECK(!out.empty(), "prompts file " << file.string() << " holds no prompt; fix: one {\"input_ids\": [...]} per line");
  return out;
}

std::vector<SpecPrompt> spec_prompts_from_data(const Dataset& data, int64_t* skipped) {
  std::vector<SpecPrompt> out;
  int64_t skip = 0;
  for (int64_t i = 0; i < data.size(); ++i) {
    Sequence s = data.get(i);
    auto first = std::find(s.loss_mask.begin(), s.loss_mask.end(), uint8_t(1));
    const int64_t cut = first - s.loss_mask.begin();
    if (first == s.loss_mask.end() || cut == 0) {
      ++skip;
      continue;
    }
    out.push_back({std::vector<int32_t>(s.input_ids.begin(), s.input_ids.begin() + cut),
                   data.source().string() + " sequence " + std::to_string(i)});
  }
  if (skipped) *skipped = skip;
  return out;
}

std::vector<int32_t> spec_stop_ids(const EvalConfig& eval, const fs::path& target_dir, int64_t vocab,
                                   std::string* source) {
  std::vector<int32_t> ids;
  if (eval.spec_ignore_eos) {
    if (source) *source = "none (eval.spec_ignore_eos)";
    return ids;
  }
  if (!eval.spec_stop_token_ids.empty()) {
    for (int64_t id : eval.spec_stop_token_ids) {
      DF_CHECK(id < vocab, "eval.spec_stop_token_ids holds " << id << ", outside the target's vocabulary [0, " << vocab
                                                             << "); fix: list token ids of the target's tokenizer");
      ids.push_back(int32_t(id));
    }
    if (source) *source = "eval.spec_stop_token_ids";
    return ids;
  }
  ids = read_eos_token_ids(target_dir, vocab);
  if (source) *source = ids.empty() ? "none (the target's eos_token_id is null)" : "the target's eos_token_id";
  return ids;
}

double SpecPromptResult::tau() const {
  double sum = 0;
  for (int64_t a : produced) sum += double(a);
  return produced.empty() ? 0.0 : sum / double(produced.size());
}

// 2^-5 of the logit: the verify pass (bs rows) and the one-token step run different GEMM shapes,
// so cuBLAS sums in different orders at every one of the target's bf16 layers; on the H200 a
// random Qwen3-8B-sized target gave a lossless disagreement at margin 0.0853 on logit 5.43
// (2^-6 of it is 0.0849). A real bug (rollback, cache, mask) shows at any margin.
float bf16_margin_tolerance(float logit) { return std::ldexp(std::max(1.0f, std::fabs(logit)), -5); }

uint64_t spec_sample_key(uint64_t seed, size_t prompt_index) {
  return splitmix64(splitmix64(seed) ^ uint64_t(prompt_index));
}

void apply_spec_sampling(const EvalConfig& eval, SpecDecoderOptions& options) {
  options.temperature = float(eval.spec_temperature);
  options.top_p = float(eval.spec_top_p);
  options.top_k = eval.spec_top_k;
}

SpecPromptResult measure_spec_prompt(SpecDecoder& decoder, const SpecPrompt& p, int64_t max_new,
                                     const std::vector<int32_t>& stop_ids, bool baseline, bool exact,
                                     uint64_t sample_key) {
  SpecPromptResult r;
  r.where = p.where;
  r.prompt_tokens = int64_t(p.ids.size());
  const Decoded spec = decoder.decode(p.ids, max_new, stop_ids, true, sample_key);
  r.new_tokens = int64_t(spec.output.size()) - r.prompt_tokens;
  for (const SpecRound& round : spec.rounds) {
    r.produced.push_back(round.produced);
    r.accepted.push_back(round.accepted);
  }
  r.output = spec.output;
  r.spec_s = spec.decode_s;
  if (!baseline) return r;
  const Decoded alone = decoder.decode(p.ids, max_new, stop_ids, false, sample_key);
  r.target_s = alone.decode_s;
  if (decoder.sampled()) return r;
  const size_t common = std::min(spec.output.size(), alone.output.size());
  size_t i = 0;
  while (i < common && spec.output[i] == alone.output[i]) ++i;
  if (i == common && spec.output.size() == alone.output.size()) return r;
  r.first_difference = int64_t(i);
  const size_t k = i - p.ids.size();  // index into the target-alone margins (i >= n: the prompts agree)
  r.margin = k < alone.margins.size() ? alone.margins[k] : 0.0f;
  r.logit = k < alone.logits.size() ? alone.logits[k] : 0.0f;
  r.tolerance = exact ? 0.0f : bf16_margin_tolerance(r.logit);
  auto token = [](const std::vector<int32_t>& v, size_t at) {
    return at < v.size() ? std::to_string(v[at]) : std::string("the end of the output");
  };
  DF_CHECK(!exact && r.margin <= r.tolerance && i < common,
           "lossless check failed: " << p.where << ": at position " << i << " (new token " << k
                                     << ") speculative decoding gives " << token(spec.output, i)
                                     << " but the target's own greedy decoding gives " << token(alone.output, i)
                                     << " (its top-2 logit margin there is " << r.margin
                                     << (exact ? "; on the CPU the two must agree exactly"
                                               : ", above the bf16 tolerance " + std::to_string(r.tolerance))
                                     << "). The verify pass, the rollback or the KV caches are wrong; please report "
                                        "it with this prompt");
  return r;
}

SpecFigures summarize_spec(const std::vector<SpecPromptResult>& results, int64_t block_size) {
  SpecFigures f;
  f.block_size = block_size;
  f.histogram.assign(size_t(block_size), 0);
  f.timed = !results.empty();
  double tau_sum = 0, accept_sum = 0, micro = 0, tpot_spec = 0, tpot_target = 0;
  int64_t with_rounds = 0;  // a prompt whose prefill token stopped it has no round and no tau
  for (const SpecPromptResult& r : results) {
    ++f.prompts;
    f.rounds += int64_t(r.produced.size());
    f.new_tokens += r.new_tokens;
    f.prompt_tau.push_back(r.tau());
    if (!r.produced.empty()) {
      ++with_rounds;
      tau_sum += r.tau();
      accept_sum += double(r.new_tokens) / double(r.produced.size());
    }
    for (int64_t a : r.produced) {
      micro += double(a);
      if (a >= 1 && a <= block_size) ++f.histogram[size_t(a - 1)];
    }
    if (r.first_difference >= 0) ++f.tolerated;
    const double tokens = double(std::max<int64_t>(r.new_tokens, 1));
    tpot_spec += r.spec_s / tokens;
    if (r.target_s) tpot_target += *r.target_s / tokens;
    else f.timed = false;
  }
  if (f.prompts == 0) return f;
  f.tau = with_rounds ? tau_sum / double(with_rounds) : 0.0;
  f.accept_length = with_rounds ? accept_sum / double(with_rounds) : 0.0;
  f.tau_micro = f.rounds ? micro / double(f.rounds) : 0.0;
  if (f.timed) {
    tpot_spec /= double(f.prompts);
    tpot_target /= double(f.prompts);
    f.tokens_per_s = tpot_spec > 0 ? 1.0 / tpot_spec : 0.0;
    f.tokens_per_s_target = tpot_target > 0 ? 1.0 / tpot_target : 0.0;
    f.speedup = tpot_spec > 0 ? tpot_target / tpot_spec : 0.0;
  }
  return f;
}

json SpecFigures::to_json() const {
  json j = {{"tau", tau},           {"tau_micro", tau_micro}, {"accept_length", accept_length},
            {"histogram", histogram}, {"block_size", block_size}, {"prompts", prompts},
            {"rounds", rounds},       {"new_tokens", new_tokens}, {"prompt_tau", prompt_tau}};
  if (timed) {
    j["tokens_per_s"] = tokens_per_s;
    j["tokens_per_s_target"] = tokens_per_s_target;
    j["speedup"] = speedup;
    j["lossless"] = tolerated == 0;
    j["tolerated_differences"] = tolerated;
  }
  return j;
}

namespace {
std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
}  // namespace

std::vector<std::string> SpecFigures::lines() const {
  std::vector<std::string> out;
  out.push_back("tau " + fmt("%.6f", tau) + " (each prompt's mean acceptance length, averaged over the " +
                std::to_string(prompts) + " prompts); micro " + fmt("%.6f", tau_micro) + " over all " +
                std::to_string(rounds) + " rounds; SGLang spec_accept_length " + fmt("%.6f", accept_length));
  std::string counts, shares;
  for (size_t k = 0; k < histogram.size(); ++k) {
    counts += (k ? " " : "") + std::to_string(histogram[k]);
    shares += (k ? " " : "") + fmt("%.1f%%", rounds ? 100.0 * double(histogram[k]) / double(rounds) : 0.0);
  }
  out.push_back("tokens per round 1.." + std::to_string(block_size) + ": " + counts + " rounds (" + shares + ")");
  if (timed) {
    out.push_back("decode (prefill excluded): " + fmt("%.1f", tokens_per_s) + " tokens/s with the drafter, " +
                  fmt("%.1f", tokens_per_s_target) + " tokens/s by the target alone; speedup " + fmt("%.3f", speedup) +
                  " (mean TPOT target alone / mean TPOT with the drafter)");
    out.push_back(tolerated == 0 ? "lossless: every output equals the target's own greedy decoding"
                                 : "lossless within bf16 noise: " + std::to_string(tolerated) +
                                       " prompt(s) differ where the target's top-2 margin is within the tolerance");
  }
  return out;
}

json spec_output_record(const SpecPromptResult& r, const std::vector<int32_t>& stop_ids) {
  const std::vector<int32_t> prompt(r.output.begin(), r.output.begin() + r.prompt_tokens);
  const std::vector<int32_t> completion(r.output.begin() + r.prompt_tokens, r.output.end());
  const bool stopped = !completion.empty() &&
                       std::find(stop_ids.begin(), stop_ids.end(), completion.back()) != stop_ids.end();
  return {{"where", r.where},
          {"prompt_ids", prompt},
          {"output_ids", completion},
          {"finish", stopped ? "stop" : "length"},
          {"produced_per_round", r.produced},
          {"accepted_per_round", r.accepted},
          {"tau", r.tau()},
          {"new_tokens", r.new_tokens}};
}

std::string spec_prompt_line(const SpecPromptResult& r, size_t index, size_t count) {
  std::string s = "prompt " + std::to_string(index + 1) + "/" + std::to_string(count) + " (" + r.where + "): " +
                  std::to_string(r.prompt_tokens) + " + " + std::to_string(r.new_tokens) + " tokens, " +
                  std::to_string(r.produced.size()) + " rounds, tau " + fmt("%.4f", r.tau()) + ", accept length " +
                  fmt("%.4f", r.produced.empty() ? 0.0 : double(r.new_tokens) / double(r.produced.size()));
  if (r.target_s) {
    const double tokens = double(std::max<int64_t>(r.new_tokens, 1));
    s += "; " + fmt("%.1f", tokens / std::max(r.spec_s, 1e-12)) + " tok/s with the drafter, " +
         fmt("%.1f", tokens / std::max(*r.target_s, 1e-12)) + " alone";
    if (r.first_difference >= 0)
      s += "; differs at position " + std::to_string(r.first_difference) + " where the target's top-2 margin is " +
           fmt("%.4g", r.margin) + " (logit " + fmt("%.4g", r.logit) + ", tolerance " + fmt("%.4g", r.tolerance) +
           "): bf16 noise";
    else
      s += "; lossless";
  }
  return s;
}

}  // namespace dflash

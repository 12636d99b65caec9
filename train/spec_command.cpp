// `dflash-train spec`: load the target and a drafter (an export or checkpoints/step-N), record the
// decode programs, decode every prompt with the drafter and by the target alone, check that the
// outputs agree, and print the figures (the last line is JSON).
#include <algorithm>
#include <cstdio>
#include <fstream>

#include "model/target.h"
#include "runtime/context.h"
#include "train/export.h"
#include "train/job.h"
#include "train/spec_eval.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {
void say(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

// The drafter's dims must be the target's: its hidden size and vocabulary (it uses the target's
// embedding and lm_head), the target's depth and layer ids (its context features).
void check_drafter_fits(const DrafterSpec& d, const TargetSpec& t, const fs::path& drafter_dir, const fs::path& target_dir) {
  const std::string w = "drafter " + drafter_dir.string() + " does not fit the target " + target_dir.string() + ": ";
  const std::string fix = "; fix: use a drafter trained for this target (or the matching target.path)";
  DF_CHECK(d.hidden_size == t.hidden_size, w << "its hidden_size is " << d.hidden_size << " but the target's is "
                                             << t.hidden_size << fix);
  DF_CHECK(d.vocab_size == t.vocab_size, w << "its vocab_size is " << d.vocab_size << " but the target's is "
                                           << t.vocab_size << fix);
  DF_CHECK(d.num_target_layers == t.num_hidden_layers, w << "it was trained on a target of " << d.num_target_layers
                                                         << " layers (num_target_layers) but this one has "
                                                         << t.num_hidden_layers << fix);
  // Equal depths suffice: read_drafter_config keeps every target_layer_id below num_target_layers.
}
}  // namespace

SpecFigures run_spec(const Config& cfg, const SpecCommandOptions& o) {
  Job job = setup_job(cfg, say);
  const Device device = job.devices[0];
  const ExportedDrafter found = read_drafter_config(o.drafter);
  const DrafterSpec& spec = found.spec;
  check_drafter_fits(spec, job.target, o.drafter, cfg.target.path);
  if (spec.block_size != cfg.drafter.block_size)
    say("note: the drafter's block size " + std::to_string(spec.block_size) + " (from " + o.drafter.string() +
        ") is used, not drafter.block_size = " + std::to_string(cfg.drafter.block_size) + " of the config");

  std::vector<SpecPrompt> prompts;
  if (!o.prompts.empty()) {
    prompts = read_spec_prompts(o.prompts);
  } else {
    std::unique_ptr<Dataset> data = open_eval_data(job, say);
    DF_CHECK(data, cfg.source.string() << ": spec needs prompts: pass --prompts FILE.jsonl, or set data.eval (its "
                                       << "sequences are cut before their first loss_mask = 1 position)");
    int64_t skipped = 0;
    prompts = spec_prompts_from_data(*data, &skipped);
    DF_CHECK(!prompts.empty(), data->source().string() << ": no sequence has a prompt part (loss_mask 0 before a 1); "
                                                       << "pass --prompts FILE.jsonl");
    say("prompts: " + std::to_string(prompts.size()) + " from " + data->source().string() +
        " (each cut before its first loss_mask = 1)" +
        (skipped ? "; " + std::to_string(skipped) + " sequences without a prompt part skipped" : ""));
  }
  const int64_t max_new = o.max_new_tokens.value_or(cfg.eval.spec_max_new_tokens);
  DF_CHECK(max_new >= 1, "--max-new-tokens " << max_new << ": it must be at least 1");
  std::string stop_source;
  const std::vector<int32_t> stop = spec_stop_ids(cfg.eval, cfg.target.path, job.target.vocab_size, &stop_source);
  int64_t longest = 0;
  for (const SpecPrompt& p : prompts) longest = std::max(longest, int64_t(p.ids.size()));
  const int64_t max_len = longest + max_new;
  for (const SpecPrompt& p : prompts)
    check_decode_prompt(p.ids, max_new, job.target.vocab_size, max_len, job.target.max_position_embeddings, p.where);

  // Weights in their own context; the decoder records its programs in another on the same device.
  Context weights(device);
  ContextScope scope(weights);
  Target target(cfg.target.path, spec.target_layer_ids, 1);
  Drafter drafter(spec, target.embed_tokens(), target.lm_head());
  load_drafter_weights(o.drafter, spec, drafter.params());
  SpecDecoderOptions opt;
  opt.max_len = max_len;
  opt.prefill_chunk = cfg.eval.spec_prefill_chunk;
  opt.graphs = cfg.runtime.graphs;
  opt.rollback_bias = o.rollback_bias;
  apply_spec_sampling(cfg.eval, opt);
  SpecDecoder decoder(device, target, &drafter, opt);
  std::string stops;
  for (int32_t id : stop) stops += (stops.empty() ? "" : ", ") + std::to_string(id);
  say("spec: drafter " + o.drafter.string() + " (block size " + std::to_string(spec.block_size) + ") on target " +
      cfg.target.path.string() + " (" + device.str() + (cfg.runtime.graphs ? ", recorded programs" : ", eager") +
      "); " + std::to_string(prompts.size()) + " prompts, max_new_tokens " + std::to_string(max_new) + ", stop ids " +
      (stop.empty() ? stop_source : "[" + stops + "] (" + stop_source + ")") + ", " +
      (decoder.sampled() ? "sampled (temperature " + std::to_string(opt.temperature) + ", top_p " +
                               std::to_string(opt.top_p) + ", top_k " + std::to_string(opt.top_k) + ", seed " +
                               std::to_string(cfg.eval.spec_seed) + "; speculative rejection sampling)"
                         : std::string("greedy")));

  // One short warm-up decode of each kind, so that first-touch costs stay out of the timings.
  const int64_t warm = std::min<int64_t>(max_new, 2 * spec.block_size);
  decoder.decode(prompts[0].ids, warm, stop, true);
  decoder.decode(prompts[0].ids, warm, stop, false);

  // --output: opened before decoding (a bad path fails at once); a whole line per prompt, flushed,
  // written to a temporary name and renamed at the end, so an interrupted run leaves no torn file.
  std::ofstream records;
  const fs::path records_tmp = o.output.string() + ".tmp";
  if (!o.output.empty()) {
    records.open(records_tmp, std::ios::trunc);
    DF_CHECK(records, "--output " << o.output.string() << ": cannot write " << records_tmp.string()
                                  << "; fix: choose a path in an existing, writable folder");
  }
  const bool exact = device.is_cpu();
  std::vector<SpecPromptResult> results;
  for (size_t i = 0; i < prompts.size(); ++i) {
    results.push_back(
        measure_spec_prompt(decoder, prompts[i], max_new, stop, true, exact, spec_sample_key(cfg.eval.spec_seed, i)));
    say(spec_prompt_line(results.back(), i, prompts.size()));
    if (records.is_open()) {
      records << spec_output_record(results.back(), stop).dump() << "\n";
      records.flush();
      DF_CHECK(records, "--output " << o.output.string() << ": writing " << records_tmp.string()
                                    << " failed (disk full?); fix: free space or choose another path");
    }
  }
  if (records.is_open()) {
    records.close();
    std::error_code ec;
    fs::rename(records_tmp, o.output, ec);
    DF_CHECK(!ec, "--output " << o.output.string() << ": cannot rename " << records_tmp.string() << " to it ("
                              << ec.message() << ")");
    say("per-prompt records: " + o.output.string());
  }
  SpecFigures f = summarize_spec(results, spec.block_size);
  for (const std::string& line : f.lines()) say(line);
  say(f.to_json().dump());
  return f;
}

}  // namespace dflash

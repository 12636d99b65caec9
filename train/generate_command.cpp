// `dflash-train generate`: settings, checks before anything runs, this rank's share, the decoding
// loop's records and progress lines, and the merge of the parts.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <set>
#include <thread>

#include "model/batch_generator.h"
#include "model/target.h"
#include "runtime/context.h"
#include "train/generate.h"
#include "train/generate_output.h"
#include "train/job.h"
#include "train/memory_fit.h"
#include "train/spec_eval.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
using Clock = std::chrono::steady_clock;
double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

std::string fixed(double v, int digits) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

std::string duration(double s) {
  const int64_t t = int64_t(s + 0.5);
  if (t < 60) return std::to_string(t) + "s";
  if (t < 3600) return std::to_string(t / 60) + "m" + std::to_string(t % 60) + "s";
  return std::to_string(t / 3600) + "h" + std::to_string(t % 3600 / 60) + "m";
}

// The launcher's rank and world. generate meets no other rank, so a missing MASTER_ADDR or
// MASTER_PORT (needed by the trainer's rendezvous) is not asked for.
LaunchInfo launch_for_generate() {
  return launch_from_environment([](const std::string& name) -> std::optional<std::string> {
    // env: RANK WORLD_SIZE LOCAL_RANK LOCAL_WORLD_SIZE SLURM_PROCID SLURM_NTASKS SLURM_LOCALID MASTER_ADDR MASTER_PORT
    if (const char* v = std::getenv(name.c_str())) return std::string(v);
    if (name == "MASTER_ADDR") return std::string("127.0.0.1");
    if (name == "MASTER_PORT") return std::string("29500");
    return std::nullopt;
  });
}

// The device of this rank: one process alone uses the first of runtime.devices; rank K of a
// launched run takes its local GPU (LOCAL_RANK), or the CPU when the config says "cpu" or there is
// no GPU.
Device rank_device(const Job& job, const LaunchInfo& launch) {
  const Device first = job.devices[0];
  if (!launch.distributed() || first.is_cpu()) return first;
#ifdef DFLASH_CUDA
  const char* cvd = std::getenv("CUDA_VISIBLE_DEVICES");
  return Device::cuda(local_gpu_for(launch, cuda_backend::device_count(), job.cfg.runtime.devices,
                                    cvd ? std::optional<std::string>(cvd) : std::nullopt));
#else
  return first;
#endif
}

// Every setting that decides the outputs (generate_header adds their hash).
json output_settings(const Job& job, const TargetChecksums& sums, const std::vector<int32_t>& stop, bool cuda) {
  const TargetSpec& t = job.target;
  const GenerateConfig& g = job.cfg.generate;
  return {{"target", {{"embed_tokens_crc32", sums.embed_tokens},
                      {"lm_head_crc32", sums.lm_head},
                      {"vocab_size", t.vocab_size},
                      {"hidden_size", t.hidden_size},
                      {"intermediate_size", t.intermediate_size},
                      {"num_hidden_layers", t.num_hidden_layers},
                      {"num_attention_heads", t.num_attention_heads},
                      {"num_key_value_heads", t.num_key_value_heads},
                      {"head_dim", t.head_dim}}},
          {"max_new_tokens", g.max_new_tokens},
          {"temperature", g.temperature},
          {"top_p", g.top_p},
          {"top_k", g.top_k},
          {"seed", g.seed},
          {"stop_token_ids", stop},
          {"precision", cuda ? "bf16" : "f32"}};
}

// Rank K > 0 waits for rank 0 to write a synthetic target (every rank reads the same folder).
void wait_for_synthetic_target(const Config& cfg) {
  const fs::path config = cfg.target.path / "config.json";
  const auto t0 = Clock::now();
  while (!fs::exists(config)) {
    DF_CHECK(seconds_since(t0) < cfg.runtime.rendezvous_timeout_s,
             "generate: rank 0 did not write the synthetic target " << cfg.target.path.string() << " within "
                                                                    << cfg.runtime.rendezvous_timeout_s
                                                                    << " s (runtime.rendezvous_timeout_s); fix: "
                                                                       "check rank 0's log, or write the target "
                                                                       "first with one process");
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(200));  // the folder is renamed into place whole
}
}  // namespace

GenerateSummary run_generate(const Config& given, const GenerateCommandOptions& o) {
  const LaunchInfo launch = o.launch ? *o.launch : launch_for_generate();
  const int rank = launch.rank, world = launch.world;
  const std::string tag =
      world > 1 ? "generate[rank " + std::to_string(rank) + "/" + std::to_string(world) + "]" : "generate";
  auto say = [&](const std::string& s) {
    std::printf("%s: %s\n", tag.c_str(), s.c_str());
    std::fflush(stdout);
  };
  DF_CHECK(!o.output.empty(), "generate needs --output FILE.jsonl");
  Config cfg = given;
  if (rank > 0 && cfg.target.synthetic.enabled) {
    wait_for_synthetic_target(cfg);
    cfg.target.synthetic.enabled = false;
  }
  Job job = setup_job(cfg, say);
  const Device device = rank_device(job, launch);
  const TargetSpec& ts = job.target;
  const GenerateConfig& g = cfg.generate;

  // Everything is checked before the target is loaded.
  const std::vector<GeneratePrompt> prompts = read_generate_prompts(o.prompts);
  std::string stop_source;
  const std::vector<int32_t> stop = spec_stop_ids(cfg.eval, cfg.target.path, ts.vocab_size, &stop_source);
  int64_t longest = 0;
  for (const GeneratePrompt& p : prompts) longest = std::max(longest, int64_t(p.ids.size()));
  const int64_t capacity = g.max_length > 0 ? g.max_length : longest + g.max_new_tokens;
  for (const GeneratePrompt& p : prompts)
    check_generate_request(p.ids, g.max_new_tokens, ts.vocab_size, capacity, ts.max_position_embeddings, p.where);
  const json header =
      generate_header(output_settings(job, target_checksums(cfg.target.path, ts), stop, device.is_cuda()));
  std::map<std::string, const GeneratePrompt*> by_key;
  for (const GeneratePrompt& p : prompts) by_key[p.key] = &p;
  const fs::path mine = generate_part_path(o.output, rank, world);
  std::set<std::string> done;
  for (const fs::path& part : generate_parts(o.output)) {
    const GenerateFile f = read_generate_file(part, header, part == mine, by_key);
    if (f.torn_bytes && part == mine)
      say("repaired " + part.string() + ": cut its torn last line (" + std::to_string(f.torn_bytes) +
          " bytes, a record interrupted while written); that prompt is generated again");
    for (const auto& [key, record] : f.records) done.insert(key);
  }

  GenerateSummary sum;
  sum.prompts = int64_t(prompts.size());
  std::vector<const GeneratePrompt*> todo;
  for (size_t i = size_t(rank); i < prompts.size(); i += size_t(world)) {
    ++sum.share;
    if (done.count(prompts[i].key)) ++sum.skipped;
    else todo.push_back(&prompts[i]);
  }
  const bool sampled = g.temperature > 0;
  say(std::to_string(prompts.size()) + " prompts in " + o.prompts.string() +
      (world > 1 ? "; this rank's share " + std::to_string(sum.share) : "") + "; " + std::to_string(sum.skipped) +
      " already written, " + std::to_string(todo.size()) + " to generate; max_new_tokens " +
      std::to_string(g.max_new_tokens) + ", stop ids " +
      (stop.empty() ? stop_source : json(stop).dump() + " (" + stop_source + ")") +
      ", " + (sampled ? "sampled (temperature " + fixed(g.temperature, 3) + ", top_p " + fixed(g.top_p, 3) +
                            ", top_k " + std::to_string(g.top_k) + ", seed " + std::to_string(g.seed) + ")"
                      : std::string("greedy")));

  if (!todo.empty()) {
    const int64_t slots = g.batch;
    GenerateShape shape{ts, slots, capacity, g.prefill_chunk, device.is_cuda()};
    check_generate_fit(shape, available_memory_bytes(device), device.str(),
                       device.is_cuda() ? "free memory of the GPU" : "the host's available memory");
    Context weights(device);
    ContextScope scope(weights);
    Target target(cfg.target.path, {}, 1);
    GenerateOptions opt;
    opt.slots = slots;
    opt.capacity = capacity;
    opt.prefill_chunk = g.prefill_chunk;
    opt.graphs = cfg.runtime.graphs;
    opt.temperature = float(g.temperature);
    opt.top_p = float(g.top_p);
    opt.top_k = g.top_k;
    opt.slot_order = o.slot_order;
    opt.ignore_top_p = o.ignore_top_p;
    uint64_t arena = available_memory_bytes(device);
    if (cfg.runtime.memory_limit_gb > 0) arena = uint64_t(cfg.runtime.memory_limit_gb * double(1ull << 30));
    BatchGenerator generator(device, target, opt, arena);
    say("target " + cfg.target.path.string() + " on " + device.str() + ": " + std::to_string(slots) + " slots of " +
        std::to_string(capacity) + " positions, prefill chunks of " + std::to_string(opt.prefill_chunk) + " rows" +
        (cfg.runtime.graphs ? ", recorded programs" : ", eager") + "; appending to " + mine.string());
    GenerateAppender out(mine, header);
    std::vector<GenerateRequest> requests;
    for (const GeneratePrompt* p : todo)
      requests.push_back({p->ids, g.max_new_tokens, generate_sample_key(g.seed, p->key)});
    const auto t0 = Clock::now();
    auto last_line = t0;
    auto progress = [&](bool force) {
      if (!force && std::chrono::duration<double>(Clock::now() - last_line).count() < g.progress_every_s) return;
      last_line = Clock::now();
      const double s = seconds_since(t0), rate = s > 0 ? double(sum.new_tokens) / s : 0;
      const int64_t left = int64_t(todo.size()) - sum.generated;
      std::string eta = "-";
      if (sum.generated > 0) eta = duration(s / double(sum.generated) * double(left));
      say(std::to_string(sum.skipped + sum.generated) + "/" + std::to_string(sum.share) + " prompts, " +
          std::to_string(sum.new_tokens) + " new tokens, " + fixed(rate, 1) + " tokens/s, ETA " + eta);
    };
    generator.run(
        requests, stop,
        [&](const GenerateResult& r) {
          out.append(generate_record(*todo[r.request], r.output, r.stopped));
          ++sum.generated;
          sum.stopped += r.stopped ? 1 : 0;
          progress(false);
        },
        [&](int64_t tokens) {
          sum.new_tokens += tokens;
          progress(false);
        });
    sum.seconds = seconds_since(t0);
    // The prefill's first token of every prompt is not counted by the steps.
    sum.new_tokens += sum.generated;
    progress(true);
  }
  sum.merged = merge_generate_parts(o.output, header, prompts, &sum.written);
  say("done: " + std::to_string(sum.generated) + " prompts generated (" + std::to_string(sum.stopped) +
      " ended by a stop id, " + std::to_string(sum.generated - sum.stopped) + " by max_new_tokens), " +
      std::to_string(sum.skipped) + " skipped as already written; " + std::to_string(sum.new_tokens) +
      " new tokens in " + fixed(sum.seconds, 2) + " s (" +
      fixed(sum.seconds > 0 ? double(sum.new_tokens) / sum.seconds : 0.0, 1) + " tokens/s)");
  if (sum.merged)
    say(o.output.string() + ": every one of the " + std::to_string(sum.prompts) + " prompts, in their order");
  else
    say(std::to_string(sum.written) + " of " + std::to_string(sum.prompts) + " prompts written so far in " +
        o.output.string() + " and its parts; the rank that finishes last merges them into " + o.output.string() +
        " (or rerun the same command with one process)");
  json last = {{"prompts", sum.prompts},       {"share", sum.share},       {"skipped", sum.skipped},
               {"generated", sum.generated},   {"stopped", sum.stopped},   {"new_tokens", sum.new_tokens},
               {"seconds", sum.seconds},       {"written", sum.written},   {"merged", sum.merged}};
  std::printf("%s\n", last.dump().c_str());
  std::fflush(stdout);
  return sum;
}

}  // namespace dflash

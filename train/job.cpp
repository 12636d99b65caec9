// Job setup: dump folder, synthetic target and data, drafter spec, devices.
#include "train/job.h"

#include <fstream>
#include <thread>
#include <unistd.h>

#include "data/synthetic.h"
#include "model/target.h"
#include "runtime/context.h"
#include "runtime/fileio.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace dflash {

namespace fs = std::filesystem;

void ensure_writable_dir(const fs::path& dir, const std::string& key) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec || !fs::is_directory(dir))
    DF_FAIL(key << " = \"" << dir.string() << "\" cannot be created as a folder (" << (ec ? ec.message() : "a file is in the way")
                << "); choose another path or fix the permissions");
  // Unique per thread too: ranks run as threads of one process (tests) probe the same folder.
  fs::path probe = dir / (".write-probe-" + std::to_string(::getpid()) + "-" +
                          std::to_string(std::hash<std::thread::id>()(std::this_thread::get_id())));
  try {
    write_file_atomic(probe, std::string_view("ok"));
  } catch (const Error& e) {
    DF_FAIL(key << " = \"" << dir.string() << "\" is not writable: " << e.what()
                << "; choose a folder you can write to, or fix its permissions");
  }
  fs::remove(probe, ec);
}

std::vector<Device> resolve_devices(const RuntimeConfig& rt, std::string* note) {
  std::vector<Device> out;
  const std::string& d = rt.devices;
  int gpus = 0;
#ifdef DFLASH_CUDA
  gpus = cuda_backend::device_count();
#endif
  auto cpu = [&](const std::string& why) {
    for (int64_t i = 0; i < rt.cpu_workers; ++i) out.push_back(Device::cpu(int(i)));
    if (note) *note = why;
  };
  if (d == "cpu") {
    cpu("runtime.devices = \"cpu\"");
  } else if (d == "auto" && gpus == 0) {
    cpu("runtime.devices = \"auto\": no GPU found; training on the CPU");
  } else if (d == "auto") {
    for (int i = 0; i < gpus; ++i) out.push_back(Device::cuda(i));
    if (note) *note = "runtime.devices = \"auto\": " + std::to_string(gpus) + " GPU(s) found";
  } else {
    DF_CHECK(gpus > 0, "runtime.devices = \"" << d << "\" but no CUDA device is visible"
                                              << (gpus == 0 ? " (or this build has no CUDA backend)" : "")
                                              << "; use \"cpu\" or \"auto\"");
    std::vector<int> ids;
    if (d == "cuda") {
      for (int i = 0; i < gpus; ++i) ids.push_back(i);
    } else {
      std::string list = d.substr(5);
      size_t pos = 0;
      while (pos <= list.size()) {
        size_t comma = list.find(',', pos);
        ids.push_back(std::stoi(list.substr(pos, comma - pos)));
        if (comma == std::string::npos) break;
        pos = comma + 1;
      }
    }
    for (int i : ids) {
      DF_CHECK(i >= 0 && i < gpus, "runtime.devices = \"" << d << "\" names cuda:" << i << " but only " << gpus
                                                          << " GPU(s) are visible");
      out.push_back(Device::cuda(i));
    }
    if (note) *note = "runtime.devices = \"" + d + "\"";
  }
  return out;
}

DrafterSpec drafter_spec_for(const Config& cfg, const TargetSpec& t) {
  const DrafterConfig& d = cfg.drafter;
  DrafterSpec s;
  s.hidden_size = t.hidden_size;
  s.vocab_size = t.vocab_size;
  s.intermediate_size = d.intermediate_size ? d.intermediate_size : t.intermediate_size;
  s.num_hidden_layers = d.num_hidden_layers;
  s.num_attention_heads = d.num_attention_heads ? d.num_attention_heads : t.num_attention_heads;
  s.num_key_value_heads = d.num_key_value_heads ? d.num_key_value_heads : t.num_key_value_heads;
  s.head_dim = d.head_dim ? d.head_dim : t.head_dim;
  s.rms_norm_eps = d.rms_norm_eps;
  s.rope_theta = d.rope_theta > 0 ? d.rope_theta : t.rope_theta;
  int64_t longest = 0;
  for (const Bucket& b : cfg.buckets) longest = std::max(longest, b.seq);
  s.max_position_embeddings = std::max(t.max_position_embeddings, longest);
  s.block_size = d.block_size;
  DF_CHECK(d.mask_token_id.has_value(), cfg.source.string() << ": drafter.mask_token_id is required");
  s.mask_token_id = *d.mask_token_id;
  s.num_target_layers = t.num_hidden_layers;
  s.target_layer_ids = cfg.target.layer_ids.empty() ? default_target_layer_ids(t.num_hidden_layers, d.num_hidden_layers)
                                                     : cfg.target.layer_ids;
  s.loss_decay_gamma = d.loss_decay_gamma;
  return s;
}

Job setup_job(const Config& cfg, const LogFn& log) {
  Job job;
  job.cfg = cfg;
  ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder");
  const fs::path& tdir = cfg.target.path;
  if (cfg.target.synthetic.enabled && !fs::exists(tdir / "config.json")) {
    log("writing a random " + cfg.target.synthetic.architecture + " target to " + tdir.string());
    write_random_target(tdir, cfg.target.synthetic);
  }
  DF_CHECK(fs::exists(tdir / "config.json"),
           "target.path = \"" << tdir.string() << "\" has no config.json: point it at a Hugging Face model directory");
  job.target = read_target_spec(tdir);
  job.drafter = drafter_spec_for(cfg, job.target);
  job.devices = resolve_devices(cfg.runtime, &job.device_note);
  return job;
}

namespace {
std::unique_ptr<Dataset> open_or_generate(const Job& job, const fs::path& path, bool eval, const LogFn& log) {
  const SyntheticDataConfig& syn = job.cfg.data.synthetic;
  if (syn.enabled && !fs::exists(path)) {
    int64_t count = eval ? syn.eval_sequences : syn.train_sequences;
    uint64_t seed = eval ? syn.seed + 1000003 : syn.seed;
    log("generating " + std::to_string(count) + (eval ? " eval" : " training") + " sequences from the target into " +
        path.string());
    Context ctx(Device::cpu());
    ContextScope scope(ctx);
    Target target(job.cfg.target.path, {0}, syn.max_length);
    std::vector<Sequence> seqs = generate_from_target(target, syn, count, seed, job.drafter.mask_token_id);
    char share[64];
    std::snprintf(share, sizeof share, "%.3f", distinct_4gram_share(seqs));
    double d = distinct_4gram_share(seqs);
    log(std::string("  distinct 4-gram share of the generated tokens: ") + share +
        (d < 0.3 ? " (low: the continuations loop; raise data.synthetic.temperature)" : " (the data do not loop)"));
    fs::create_directories(path.parent_path().empty() ? fs::path(".") : path.parent_path());
    write_jsonl(path, seqs);
  }
  return open_dataset(path, job.target.vocab_size);
}
}  // namespace

std::unique_ptr<Dataset> open_train_data(const Job& job, const LogFn& log) {
  DF_CHECK(!job.cfg.data.train.empty(), job.cfg.source.string() << ": data.train is required");
  return open_or_generate(job, job.cfg.data.train, false, log);
}

std::unique_ptr<Dataset> open_eval_data(const Job& job, const LogFn& log) {
  if (job.cfg.data.eval.empty()) return nullptr;
  return open_or_generate(job, job.cfg.data.eval, true, log);
}

}  // namespace dflash

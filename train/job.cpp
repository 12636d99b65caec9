// Job setup: dump folder, synthetic target and data, drafter spec, devices.
#include "train/job.h"

#include <fstream>
#include <thread>
#include <unistd.h>

#include "data/synthetic.h"
#include "dist/launch.h"
#include "model/target.h"
#include "runtime/context.h"
#include "runtime/fileio.h"
#include "train/export.h"
#include "train/memory_fit.h"
#include "graphs/engine.h"
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
      ids = cuda_device_ids(d);
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

uint64_t worker_memory_bytes(const Job& job, std::string* source) {
  const RuntimeConfig& rt = job.cfg.runtime;
  const Device& device = job.devices[0];
  uint64_t bytes;
  if (rt.memory_limit_gb > 0) {
    const double b = rt.memory_limit_gb * double(1ull << 30);
    bytes = b >= 18446744073709549568.0 ? UINT64_MAX : uint64_t(b);
    if (source) *source = "runtime.memory_limit_gb = " + std::to_string(rt.memory_limit_gb);
  } else {
    bytes = available_memory_bytes(device);
    if (source) *source = device.is_cuda() ? "free memory of the GPU" : "the host's available memory";
  }
  if (device.is_cpu() && job.devices.size() > 1) {
    bytes /= job.devices.size();
    if (source) *source += ", split among " + std::to_string(job.devices.size()) + " CPU workers";
  }
  return bytes;
}

void check_memory_before_startup(const Job& job, bool train, bool online) {
  // Persistent tensors are checked against the device itself: runtime.memory_limit_gb budgets
  // the activation arena (docs/config.md), which Engine::build checks once the plans exist.
  const Device& device = job.devices[0];
  uint64_t available = available_memory_bytes(device);
  std::string source = device.is_cuda() ? "free memory of the GPU" : "the host's available memory";
  if (device.is_cpu() && job.devices.size() > 1) {
    available /= job.devices.size();
    source += ", split among " + std::to_string(job.devices.size()) + " CPU workers";
  }
  WorkerShape w{job.target, job.drafter, job.cfg.buckets, job.devices[0].is_cuda(), train, online};
  check_persistent_fit(w, available, job.devices[0].str(), source);
}

void check_drafter_init(const Config& cfg) {
  if (cfg.drafter.init.empty()) return;
  if (auto problem = drafter_dir_problem(cfg.drafter.init))
    DF_FAIL(cfg.source.string() << ": drafter.init = \"" << cfg.drafter.init.string() << "\": " << *problem);
}

DataScreen screen_job_data(const Job& job, const Dataset& data, const std::string& what, const LogFn& warn) {
  const Config& c = job.cfg;
  const int64_t bs = job.drafter.block_size;
  DataScreen s = screen_dataset(data, c.buckets, parse_overflow_policy(c.data.overflow, "data.overflow"), bs,
                                job.drafter.mask_token_id);
  const std::string named = what + " '" + data.source().string() + "'";
  if (auto w = mask_token_warning(s, job.drafter.mask_token_id, named)) warn(*w);
  DF_CHECK(s.no_anchor_count < data.size(),
           named << ": no sequence has a valid anchor (" << data.size() << " sequences, " << s.shorter_than_block
                 << " shorter than the block size " << bs << ", the others with no loss_mask = 1 at a position p <= "
                 << "length - block size), so nothing would be trained or measured; fix: mark the response tokens "
                 << "with loss_mask = 1, use longer sequences, or lower drafter.block_size");
  return s;
}

std::unique_ptr<Dataset> open_eval_data(const Job& job, const LogFn& log) {
  if (job.cfg.data.eval.empty()) return nullptr;
  return open_or_generate(job, job.cfg.data.eval, true, log);
}

}  // namespace dflash

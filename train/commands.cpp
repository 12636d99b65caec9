// prepare, hidden, eval and export.
#include "train/commands.h"

#include <cstdio>
#include <exception>

#include "data/shards.h"
#include "model/target.h"
#include "train/cluster.h"
#include "train/export.h"
#include "train/folder_lock.h"
#include "train/job.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {
void say(const std::string& s) {
  std::printf("%s\n", s.c_str());
  std::fflush(stdout);
}

size_t available(const Job& job) { return worker_memory_bytes(job); }

// This rank's share of `dflash-train hidden`.
void hidden_features(const Config& cfg, const ClusterSpec& cluster, Coordinator& coord) {
  const int rank = coord.rank(), ranks = coord.size();
  auto log = [&](const std::string& s) {
    if (rank == 0) say(s);
  };
  // Rank 0 writes what is generated (a synthetic target and data) before the others read it.
  if (rank != 0) coord.barrier();
  Config setup = cfg;
  if (cluster.coord) setup.runtime.devices = "cpu";  // the rank's device comes from its launcher
  Job job = setup_job(setup, log);
  job.cfg.runtime.devices = cfg.runtime.devices;
  std::unique_ptr<Dataset> data = open_train_data(job, log);
  if (rank == 0) coord.barrier();
  if (cluster.coord) job.devices = cluster.devices;
  OverflowPolicy overflow = parse_overflow_policy(cfg.data.overflow, "data.overflow");
  std::vector<int64_t> rows = hidden_rows_for(data->lengths(), cfg.buckets, overflow);
  fs::path dir = cfg.data.hidden.empty() ? cfg.job.dump_folder / "hidden" : cfg.data.hidden;
  const int64_t width = job.drafter.num_features() * job.drafter.hidden_size;
  check_memory_before_startup(job, false, true);
  // This rank's contiguous share of the sequences; the target runs on fixed (bucket) shapes, so a
  // sequence's features do not depend on which rank computes them or with which neighbours.
  const int64_t n = data->size(), first = n * rank / ranks, last = n * (rank + 1) / ranks;
  Replica replica(replica_options(job, false, true));
  replica.build(available(job));
  std::unique_ptr<HiddenShardWriter> writer =
      ranks > 1 ? std::make_unique<HiddenShardWriter>(dir, width, HiddenDType::f32, int64_t(1) << 30, HiddenPart{rank, first})
                : std::make_unique<HiddenShardWriter>(dir, width, HiddenDType::f32);
  // Consecutive sequences (dataset order) of one bucket run together, B at a time.
  std::vector<int64_t> group;
  int group_bucket = -1;
  HostBatch host;
  std::vector<float> features;
  auto flush = [&] {
    if (group.empty()) return;
    const Bucket& b = cfg.buckets[size_t(group_bucket)];
    host.resize(b, 0, false);
    for (size_t k = 0; k < group.size(); ++k) {
      Sequence s = truncate_sequence(data->get(group[k]), b.seq);
      std::copy(s.input_ids.begin(), s.input_ids.end(), host.input_ids.begin() + long(k) * b.seq);
    }
    {
      ContextScope scope(replica.context());
      replica.step(size_t(group_bucket)).stage(host);
    }
    replica.run_target(size_t(group_bucket));
    ContextScope scope(replica.context());
    features = replica.step(size_t(group_bucket)).hidden().to_floats();
    for (size_t k = 0; k < group.size(); ++k) writer->append(features.data() + k * size_t(b.seq * width), rows[size_t(group[k])]);
    group.clear();
  };
  for (int64_t i = first; i < last; ++i) {
    if (rows[size_t(i)] == 0) {  // skipped by the overflow policy: stored empty
      flush();
      writer->append(nullptr, 0);
      continue;
    }
    int b = smallest_bucket_for(cfg.buckets, rows[size_t(i)]);
    if (b != group_bucket || int64_t(group.size()) == cfg.buckets[size_t(b)].batch) flush();
    group_bucket = b;
    group.push_back(i);
  }
  flush();
  writer->finish();
  if (ranks > 1) {
    std::vector<std::string> parts = coord.all_gather(writer->shards_json());
    if (rank == 0) write_hidden_index(dir, width, HiddenDType::f32, parts);
    coord.barrier();  // the index exists before any rank reports success
  }
  log("hidden: " + std::to_string(n) + " sequences of target features (width " + std::to_string(width) + ")" +
      (ranks > 1 ? " by " + std::to_string(ranks) + " ranks" : "") + " -> " + dir.string() +
      "; train from them with data.mode = \"offline\"");
}
}  // namespace

ReplicaOptions replica_options(const Job& job, bool eval, bool features) {
  ReplicaOptions o;
  o.device = job.devices[0];
  o.spec = job.drafter;
  o.target_dir = job.cfg.target.path;
  o.buckets = job.cfg.buckets;
  o.online = true;
  o.train = false;
  o.eval = eval;
  o.features = features;
  o.graphs = job.cfg.runtime.graphs;
  o.chunk_rows = job.cfg.training.chunk_rows;
  return o;
}

void run_prepare(const Config& cfg) {
  const std::optional<FolderLock> lock = lock_dump_folder(cfg.job.dump_folder, nullptr);
  Job job = setup_job(cfg, say);
  fs::path root = cfg.data.shards.empty() ? cfg.job.dump_folder / "shards" : cfg.data.shards;
  auto pack = [&](const std::unique_ptr<Dataset>& data, const char* name) {
    if (!data) return;
    std::vector<Sequence> seqs;
    for (int64_t i = 0; i < data->size(); ++i) seqs.push_back(data->get(i));
    fs::path dir = root / name;
    write_token_shards(dir, seqs, job.target.vocab_size);
    say(std::string("prepare: ") + std::to_string(seqs.size()) + " " + name + " sequences from " +
        data->source().string() + " -> " + dir.string());
  };
  pack(open_train_data(job, say), "train");
  pack(open_eval_data(job, say), "eval");
  say("point data.train (and data.eval) at these folders to train from the shards");
}

void run_hidden(const Config& cfg, const ClusterSpec* given) {
  std::unique_ptr<ProcessGroup> pg;
  ClusterSpec cluster;
  if (given) {
    cluster = *given;
  } else if (LaunchInfo launch = launch_from_environment(); launch.distributed()) {
    pg = ProcessGroup::join(cfg, launch, say, /*with_nccl=*/false);
    cluster = pg->spec();
  }
  LocalCoordinator local;
  Coordinator& coord = cluster.coord ? *cluster.coord : local;
  try {
    // Rank 0 holds the dump folder's lock before any rank writes its part (or every rank stops).
    const std::optional<FolderLock> lock = lock_dump_folder(cfg.job.dump_folder, &coord);
    hidden_features(cfg, cluster, coord);
  } catch (const std::exception& e) {
    // An error on this rank reaches the others (they stop instead of waiting for its part).
    if (pg) pg->fail(e.what());  // a launched process ends here: one error line, status 1
    coord.report_failure(e.what());
    throw;
  }
  if (pg) pg->finish();
}

EvalResult run_eval(const Config& cfg, const fs::path& drafter_dir) {
  Job job = setup_job(cfg, say);
  std::unique_ptr<Dataset> data = open_eval_data(job, say);
  DF_CHECK(data, cfg.source.string() << ": data.eval is not set; eval needs an eval data set");
  ExportedDrafter found = read_drafter_config(drafter_dir);
  DrafterSpec spec = job.drafter;
  std::vector<std::string> diff = drafter_spec_differences(found.spec, spec);
  DF_CHECK(diff.empty(), drafter_dir.string() << " does not match the drafter this config describes: " << diff[0]
                                              << (diff.size() > 1 ? " (and more)" : "")
                                              << "; fix the [drafter] section or pick the matching drafter");
  check_memory_before_startup(job, false, true);
  Replica replica(replica_options(job, true, false));
  {
    ContextScope scope(replica.context());
    load_drafter_weights(drafter_dir, spec, replica.drafter().params());
  }
  replica.build(available(job));
  EvalResult r = evaluate(replica, *data, parse_overflow_policy(cfg.data.overflow, "data.overflow"));
  char buf[256];
  std::snprintf(buf, sizeof buf, "eval %s on %s: loss %.6f  accuracy %.6f  tau %.6f  (%lld blocks, %lld tokens)",
                drafter_dir.string().c_str(), data->source().string().c_str(), r.loss, r.accuracy, r.tau,
                (long long)r.blocks, (long long)r.tokens);
  say(buf);
  say(r.to_json().dump());
  return r;
}

void run_export(const fs::path& checkpoint, const fs::path& out, const std::string& dtype, bool overwrite) {
  DF_CHECK(dtype == "bf16" || dtype == "f32", "--dtype " << dtype << ": use bf16 (the default) or f32");
  const FolderLock lock = FolderLock::acquire(export_lock_file(out), out, "choose another --out");
  std::error_code ec;
  DF_CHECK(overwrite || !fs::is_directory(out, ec) || fs::is_empty(out, ec),
           "export: --out " << out.string() << " is not empty; fix: pass --overwrite to replace a previous export "
                            << "there, or choose another --out");
  Context ctx(Device::cpu());
  ContextScope scope(ctx);
  export_checkpoint(checkpoint, out, dtype == "f32" ? DType::f32 : DType::bf16);
  say("exported " + checkpoint.string() + " -> " + out.string() + " (" + dtype + ")");
}

}  // namespace dflash

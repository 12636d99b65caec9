// Building the Trainer (train/trainer_internal.h): joining a launched run, the job and its data
// (screened, planned), the replicas on their devices with their recorded programs, and the
// startup report. The loop that runs it: trainer.cpp.
#include "train/trainer_internal.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "data/screen.h"
#include "graphs/startup_report.h"
#include "runtime/fileio.h"
#include "train/checkpoint.h"
#include "train/data_fingerprint.h"
#include "train/export.h"
#include "train/kernel_choices.h"
#include "train/run_identity.h"

namespace dflash::trainer_detail {

namespace {
// Rank 0 of a run logs; a one-process run is its own rank 0.
bool is_root(const ClusterSpec* given, const ProcessGroup* pg) {
  if (given) return given->first_rank == 0;
  return !pg || pg->spec().first_rank == 0;
}
}  // namespace

Trainer::Trainer(const Config& cfg, const TrainHooks& hooks, const ClusterSpec* given, ProcessGroup* pg)
    : hooks_(hooks),
      pg_(pg),
      log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), cfg.job.dump_folder), cfg.metrics.progress,
           is_root(given, pg_), !cfg.checkpoint.resume) {
  LogFn info = [this](const std::string& s) { log_.info(s); };
  if (given) cluster_ = *given;
  else if (pg_) cluster_ = pg_->spec();
  coord_ = cluster_.coord ? cluster_.coord : &local_coord_;
  const bool root = coord_->rank() == 0;
  // Rank 0 writes what is generated (a synthetic target and data) before the others read it.
  if (!root) coord_->barrier();
  try {
    // A rank's device comes from its launcher; runtime.devices may name another node's GPUs.
    Config setup = cfg;
    if (given || pg_) setup.runtime.devices = "cpu";
    job_ = setup_job(setup, info);
    job_.cfg.runtime.devices = cfg.runtime.devices;
    train_ = open_train_data(job_, info);
    eval_ = open_eval_data(job_, info);
  } catch (...) {
    if (root) coord_->report_failure("the job setup failed");
    throw;
  }
  if (root) coord_->barrier();
  coord_->check_same(config_fingerprint(job_.cfg), "the configuration");
  const Config& c = job_.cfg;
  if (root) data_fingerprint_ = job_data_fingerprints(c, info);  // what is read, synthetic data too
  if (given || pg_) {
    job_.devices = cluster_.devices;
    job_.device_note = "rank " + std::to_string(cluster_.first_rank) + " of " + std::to_string(cluster_.world);
  } else {
    cluster_.world = int(job_.devices.size());
    cluster_.devices = job_.devices;
  }
  info("dflash-train: job '" + c.job.name + "', dump folder " + c.job.dump_folder.string());
  info("devices: " + std::to_string(cluster_.world) + " rank(s)" +
       (coord_->size() > 1 ? " in " + std::to_string(coord_->size()) + " processes" : "") + " on " +
       job_.devices[0].str() + " (" + job_.device_note + ")" +
       (c.runtime.shard_optimizer && cluster_.world > 1 ? "; optimizer state sharded" : "") +
       (c.runtime.overlap_reduction && cluster_.world > 1
            ? (job_.devices[0].is_cuda() ? "; gradients reduced during the backward (" + c.runtime.reduce_dtype + ")"
                                         : "; runtime.overlap_reduction applies to GPUs: on the CPU the update reduces")
            : ""));
  check_drafter_init(c);
  identity_ = job_identity(job_);
  if (c.checkpoint.resume)  // before any startup work: a checkpoint of another run is refused by key
    if (auto dir = latest_complete_checkpoint(c.job.dump_folder))
      check_resume_identity(*dir, identity_, [this](const std::string& s) { log_.warn(s); });
  LogFn warn = [this](const std::string& s) { log_.warn(s); };
  const DataScreen screen = screen_job_data(job_, *train_, "training data", warn);
  const std::optional<DataScreen> eval_screen =
      eval_ ? std::optional(screen_job_data(job_, *eval_, "eval data", warn)) : std::nullopt;
  planner_ = std::make_unique<BatchPlanner>(train_->lengths(), c.buckets,
                                            parse_overflow_policy(c.data.overflow, "data.overflow"),
                                            c.data.shuffle_seed, train_->source().string(), screen.no_anchor);
  {
    int64_t tokens = 0;
    for (int64_t len : train_->lengths()) tokens += len;
    info("data: " + std::to_string(train_->size()) + " training sequences (" + std::to_string(tokens) + " tokens) from " +
         train_->source().string() + "; longer than the largest bucket (data.overflow = \"" + c.data.overflow +
         "\"): " + std::to_string(planner_->truncated()) + " truncated, " + std::to_string(planner_->skipped()) +
         " skipped; " + no_anchor_summary(screen, job_.drafter.block_size) +
         (eval_ ? "; " + std::to_string(eval_->size()) + " eval sequences, " +
                      no_anchor_summary(*eval_screen, job_.drafter.block_size)
                : ""));
  }
  online_ = c.data.mode == "online";
  if (!online_) {
    fs::path dir = c.data.hidden.empty() ? c.job.dump_folder / "hidden" : c.data.hidden;
    DF_CHECK(fs::exists(dir), "data.mode = \"offline\" but the hidden-state shards " << dir.string()
                                                                                     << " do not exist; run `dflash-train hidden --config "
                                                                                     << c.source.string() << "` first");
    hidden_ = std::make_unique<HiddenDataset>(
        dir, job_.drafter.num_features() * job_.drafter.hidden_size, std::nullopt,
        hidden_rows_for(train_->lengths(), c.buckets, parse_overflow_policy(c.data.overflow, "data.overflow")));
  }
  auto t0 = Clock::now();
  build_replicas();
  startup_ms_ = seconds_since(t0) * 1000;
  coord_->check_same(program_signature(replicas_[0]->engine(), replicas_[0]->drafter().params()),
                     "the recorded buckets and programs");
  if (replicas_[0]->engine()) {
    StartupReport report = make_startup_report(*replicas_[0]->engine(), cluster_.world, startup_ms_);
    report.shard_optimizer = replicas_[0]->drafter().params().sharded();
    report.kernel_choices =
        kernel_choice_lines(replicas_[0]->context().device(), job_.drafter, c.buckets, c.runtime.target_attention);
    log_.info("recorded programs (each worker):\n" + format_startup_table(report));
    const Device& device = replicas_[0]->context().device();
    const int sharing = device.is_cpu() ? int(job_.devices.size()) : 1;  // arenas in this memory
    const std::string hint =
        recompute_hint(report, c.runtime.arena_gb > 0, available_memory_bytes(device), sharing,
                       size_t(c.runtime.memory_limit_gb * double(1ull << 30) / double(sharing)));
    if (!hint.empty()) log_.info(hint);
    startup_report_ = report;  // written by run() once a resume is accepted
  } else {
    log_.info("eager mode (runtime.graphs = false): nothing recorded; every step allocates as it runs");
  }
  memory_mib_ = double(replicas_[0]->context().persistent_bytes() + replicas_[0]->context().arena_bytes()) / (1 << 20);
  if (!c.eval.spec_prompts.empty()) {
    if (!online_) info("offline mode: the target is loaded to decode eval.spec_prompts (spec_tau)");
    std::vector<Replica*> replicas;
    for (auto& r : replicas_) replicas.push_back(r.get());
    spec_ = std::make_unique<SpecMonitor>(c, replicas, info);
  }
}

std::unique_ptr<ProcessGroup> join_if_launched(const Config& cfg, const ClusterSpec* given) {
  if (given) return nullptr;
  LaunchInfo launch = launch_from_environment();
  if (!launch.distributed()) return nullptr;
  return ProcessGroup::join(cfg, launch, [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  });
}

void Trainer::build_replicas() {
  const Config& c = job_.cfg;
  const int W = cluster_.world, L = int(cluster_.devices.size());
  const bool sharded = c.runtime.shard_optimizer && W > 1;
  comm_ = cluster_.comm;
  if (!comm_ && W > 1 && cluster_.devices[0].is_cuda()) {
#ifdef DFLASH_NCCL
    std::vector<int> ids;
    for (const Device& d : cluster_.devices) ids.push_back(d.index);
    own_comm_ = std::make_unique<NcclCommunicator>(ids);
#else
    DF_FAIL("several GPUs need NCCL, which this build did not find; use one GPU (runtime.devices = \"cuda:0\")");
#endif
  } else if (!comm_ && W > 1) {
    own_comm_ = std::make_unique<ThreadCommunicator>(W);
  }
  if (own_comm_) comm_ = own_comm_.get();
  ThreadCommunicator* thread_comm = dynamic_cast<ThreadCommunicator*>(comm_);
  OptimizerConfig opt;
  opt.lr = float(c.training.lr);
  opt.beta1 = float(c.training.beta1);
  opt.beta2 = float(c.training.beta2);
  opt.eps = float(c.training.eps);
  opt.weight_decay = float(c.training.weight_decay);
  opt.max_grad_norm = float(c.training.max_grad_norm);
  opt.min_lr_ratio = float(c.training.min_lr_ratio);
  opt.total_steps = c.training.steps;
  opt.warmup_steps = int64_t(std::llround(c.training.warmup_ratio * double(c.training.steps)));
  check_memory_before_startup(job_, true, online_);
  const int64_t k = c.training.grad_accum;
  const bool tunes_gemms = c.runtime.gemm_tuning && c.runtime.graphs && cluster_.devices[0].is_cuda();
  for (int w = 0; w < L; ++w) {
    const int rank = cluster_.first_rank + w;
    ReplicaOptions o;
    o.device = cluster_.devices[size_t(w)];
    o.rank = rank;
    o.comm = comm_;
    o.spec = job_.drafter;
    o.target_dir = c.target.path;
    o.buckets = c.buckets;
    o.online = online_;
    o.train = true;
    o.eval = eval_ != nullptr;
    o.graphs = c.runtime.graphs;
    o.checkpointing = c.training.checkpointing;
    o.arena_budget = size_t(c.runtime.arena_gb * double(1ull << 30));
    o.gemm_tuning = tunes_gemms && w == 0 && cluster_.first_rank == 0;
    o.grad_accum = k;
    o.chunk_rows = c.training.chunk_rows;
    o.init_seed = c.job.seed;
    o.init_std = c.drafter.init_std;
    o.optimizer = opt;
    o.layout = ShardLayout{W, rank, sharded};
    o.record_bytes = step_record_bytes(k);
    o.overlap = c.runtime.overlap_reduction;
    o.reduce_bf16 = c.runtime.reduce_dtype == "bf16";
    log_.progress("loading worker " + std::to_string(w) + " on " + o.device.str());
    replicas_.push_back(std::make_unique<Replica>(o));
    Replica& r = *replicas_.back();
    if (thread_comm) {
      ContextScope s(r.context());
      const Tensor& g = r.drafter().params().flat_grads();
      thread_comm->register_buffer(rank, g.data<float>(), g.numel());
    }
    if (!c.drafter.init.empty()) {
      ContextScope s(r.context());
      load_drafter_weights(c.drafter.init, job_.drafter, r.drafter().params());
      if (w == 0) log_.info("warm start from " + c.drafter.init.string());
    }
  }
  const size_t available = worker_memory_bytes(job_);
  auto build = [&](int w) {
    replicas_[size_t(w)]->build(available, [&](const std::string& what) {
      log_.progress("startup: worker " + std::to_string(w) + ": " + what);
    });
  };
  if (!tunes_gemms) {
    for (int w = 0; w < L; ++w) build(w);
  } else {
    // One GEMM table for the run: rank 0's first worker tunes the shapes the saved table lacks, the
    // table goes to every rank, and every worker records with it.
    const fs::path table_file = c.job.dump_folder / "gemm_table.txt";
    std::string text;
    if (cluster_.first_rank == 0) {
      if (fs::exists(table_file)) {
        replicas_[0]->context().gemm_table() = GemmTable::parse(read_file_text(table_file), table_file.string());
        log_.info("GEMM table: " + std::to_string(replicas_[0]->context().gemm_table().size()) + " choices from " +
                  table_file.string());
      }
      build(0);
      text = replicas_[0]->context().gemm_table().to_text();
      if (replicas_[0]->engine()) log_.info(replicas_[0]->engine()->gemm_tuning_summary());
      fs::create_directories(c.job.dump_folder);
      write_file_atomic(table_file, text);
    }
    text = coord_->broadcast(text);
    for (int w = cluster_.first_rank == 0 ? 1 : 0; w < L; ++w) {
      replicas_[size_t(w)]->context().gemm_table() = GemmTable::parse(text, "rank 0's GEMM table");
      build(w);
    }
  }
  log_.done_progress();
  slots_.assign(size_t(L), std::vector<Slot>(size_t(k)));
  figures_.assign(size_t(L), std::vector<SlotFigures>(size_t(k)));
  stats_.assign(size_t(L), {0.0f, 0.0f});
}

}  // namespace dflash::trainer_detail

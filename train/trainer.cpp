// The training loop: startup (record, seal, report), resume, then steps of k micro-batches on each
// of W ranks followed by the update, with logging, evaluation, checkpoints and a clean stop. The
// ranks are this process's worker threads, or one rank per process of a run launched by torchrun
// or srun (train/cluster.h); either way every rank takes its micro-batches from the one plan.
#include "train/trainer.h"

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>

#include "data/anchors.h"
#include "data/screen.h"
#include "data/shards.h"
#include "graphs/startup_report.h"
#include "graphs/worker.h"
#include "runtime/comm.h"
#include "train/checkpoint.h"
#include "train/cluster.h"
#include "train/export.h"
#include "train/job.h"
#include "train/spec_monitor.h"
#include "train/run_identity.h"
#include "train/sharded_checkpoint.h"
#include "train/step_record.h"
#include "train/train_log.h"

namespace dflash {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {
std::atomic<int> g_stop_signal{0};
void on_signal(int sig) { g_stop_signal.store(sig); }

// Installs SIGINT/SIGTERM handlers for the trainer's lifetime.
class SignalGuard {
 public:
  SignalGuard() {
    g_stop_signal = 0;
    struct sigaction sa = {};
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_int_);
    sigaction(SIGTERM, &sa, &old_term_);
  }
  ~SignalGuard() {
    sigaction(SIGINT, &old_int_, nullptr);
    sigaction(SIGTERM, &old_term_, nullptr);
  }

 private:
  struct sigaction old_int_, old_term_;
};

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// This process's place in a run launched by torchrun or srun; null for one process, or when the
// caller gives the cluster (tests).
std::unique_ptr<ProcessGroup> join_if_launched(const Config& cfg, const ClusterSpec* given) {
  if (given) return nullptr;
  LaunchInfo launch = launch_from_environment();
  if (!launch.distributed()) return nullptr;
  return ProcessGroup::join(cfg, launch, [](const std::string& s) {
    std::printf("%s\n", s.c_str());
    std::fflush(stdout);
  });
}

// Rank 0 of a run logs; a one-process run is its own rank 0.
bool is_root(const ClusterSpec* given, const ProcessGroup* pg) {
  if (given) return given->first_rank == 0;
  return !pg || pg->spec().first_rank == 0;
}

class Trainer {
 public:
  // pg: this process's place in a launched run (it outlives the trainer), or null.
  Trainer(const Config& cfg, const TrainHooks& hooks, const ClusterSpec* given, ProcessGroup* pg)
      : hooks_(hooks),
        pg_(pg),
        log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), cfg.job.dump_folder), cfg.metrics.progress,
             is_root(given, pg_)) {
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
      log_.info("recorded programs (each worker):\n" + format_startup_table(report));
      if (root) write_startup_json(c.job.dump_folder, report);
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

  TrainResult run() {
    const Config& c = job_.cfg;
    const bool root = coord_->rank() == 0;
    TrainResult result;
    int64_t step = resume();
    result.start_step = step;
    report_weights(step);
    if (eval_ && step == 0 && root) result.before = evaluate_now("eval before training", step);
    if (spec_ && step == 0) measure_spec(step, "before training");
    SignalGuard signals;
    start_workers();
    const int64_t total = c.training.steps;
    auto t_start = Clock::now();
    int64_t first = step;
    bool saved_here = false;
    Interval interval;
    while (step < total) {
      auto t0 = Clock::now();
      stop_flag_ = stop_requested();
      prepare_step();
      for (auto& t : threads_) t->start();
      wait_workers();
      ++step;
      saved_here = false;
      StepRecord r = summarize(step, seconds_since(t0));
      if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
        DF_FAIL("training diverged at step " << step << " (bucket " << r.bucket << "): loss " << r.loss
                                             << ", gradient norm " << r.grad_norm
                                             << ". The parameters of this step are not saved; resume from the last "
                                                "checkpoint with a lower training.lr or training.max_grad_norm, and "
                                                "check the data");
      interval.add(r, gathered_.tokens);
      report_weights(step);
      if (hooks_.after_step) hooks_.after_step(step);
      if (step % c.metrics.log_every == 0 || step == total || step == first + 1) {
        log_.record(interval.mean(r, size_t(cluster_.world)), total);
        interval = Interval();
      }
      double per_step = seconds_since(t_start) / double(step - first);
      log_.progress("step " + std::to_string(step) + "/" + std::to_string(total) + "  loss " +
                    std::to_string(r.loss).substr(0, 6) + "  ETA " + format_duration(per_step * double(total - step)));
      if (c.checkpoint.every > 0 && step % c.checkpoint.every == 0 && step < total) {
        result.last_checkpoint = save(step);
        saved_here = true;
      }
      if (eval_ && root && c.training.eval_every > 0 && step % c.training.eval_every == 0 && step < total)
        evaluate_now("eval at step " + std::to_string(step), step);
      if (spec_ && c.eval.spec_every > 0 && step % c.eval.spec_every == 0 && step < total)
        measure_spec(step, "at step " + std::to_string(step));
      // Every rank stops after the same step: the flags travelled in this step's records. One
      // process also honours a signal that arrived during the step.
      const bool stop_here = !gathered_.stopping.empty() || (coord_->size() == 1 && stop_requested());
      if (stop_here) {
        const int sig = g_stop_signal.load();
        std::string who = sig == SIGINT ? "SIGINT" : sig ? "SIGTERM" : "a stop request";
        if (cluster_.world > 1 && !gathered_.stopping.empty())
          who += " (the stop flag of rank " + std::to_string(gathered_.stopping[0]) + ")";
        log_.info("received " + who + " at step " + std::to_string(step) + ": writing a checkpoint and stopping");
        if (!saved_here) result.last_checkpoint = save(step);
        result.interrupted = true;
        break;
      }
    }
    result.steps_done = step;
    threads_.clear();
    if (!result.interrupted) {
      if (step > first || !result.last_checkpoint.empty() || step == 0) result.last_checkpoint = save(step);
      if (eval_ && root) result.after = evaluate_now("eval after training", step);
      if (spec_) measure_spec(step, "after training");
      if (result.before && result.after)
        log_.info("tau estimate on the eval set: " + std::to_string(result.before->tau).substr(0, 5) + " before training, " +
                  std::to_string(result.after->tau).substr(0, 5) + " after");
    } else {
      log_.info("stopped at step " + std::to_string(step) + "; resume with the same command");
    }
    log_.info("checkpoint: " + result.last_checkpoint.string());
    coord_->barrier();  // no rank leaves while another may still need it
    if (pg_) pg_->finish();
    return result;
  }

  void fail(const std::string& message) {
    if (cluster_.coord) cluster_.coord->report_failure(message);
  }

 private:
  // Waits for every worker; a failed one aborts the communicator so the others return. Another
  // rank's failure is reported as such (it is the cause).
  void wait_workers() {
    std::exception_ptr error;
    for (auto& t : threads_) {
      try {
        t->wait();
      } catch (...) {
        if (!error && comm_) comm_->abort();
        if (!error) error = std::current_exception();
      }
    }
    if (std::optional<std::string> f = coord_->failure()) DF_FAIL(*f);
    if (error) std::rethrow_exception(error);
  }

  bool stop_requested() const { return g_stop_signal.load() != 0 || (hooks_.stop_requested && hooks_.stop_requested()); }

  void build_replicas() {
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
    for (int w = 0; w < L; ++w) {
      replicas_[size_t(w)]->build(available, [&](const std::string& what) {
        log_.progress("startup: worker " + std::to_string(w) + ": " + what);
      });
    }
    log_.done_progress();
    slots_.assign(size_t(L), std::vector<Slot>(size_t(k)));
    figures_.assign(size_t(L), std::vector<SlotFigures>(size_t(k)));
    stats_.assign(size_t(L), {0.0f, 0.0f});
  }

  std::vector<LocalShard> local_shards() {
    std::vector<LocalShard> out;
    for (auto& r : replicas_) out.push_back({r->options().rank, &r->drafter().params(), &r->optimizer()});
    return out;
  }

  // Newest complete checkpoint (when enabled): parameters, moments, step and data position. Rank 0
  // chooses it; every rank loads its part.
  int64_t resume() {
    const Config& c = job_.cfg;
    if (!c.checkpoint.resume) return 0;
    std::string chosen;
    if (coord_->rank() == 0) {
      std::vector<std::string> warnings;
      std::optional<fs::path> dir = latest_complete_checkpoint(c.job.dump_folder, &warnings);
      for (const std::string& w : warnings) log_.warn(w);
      if (dir) chosen = dir->string();
    }
    chosen = coord_->broadcast(chosen);
    if (chosen.empty()) return 0;
    const fs::path dir = chosen;
    nlohmann::json state;
    for (auto& r : replicas_) {
      ContextScope s(r->context());
      state = load_any_checkpoint(dir, r->drafter().params(), r->optimizer());
    }
    planner_->restore(PlannerState::from_json(state.at("planner"), (dir / "state.json").string()));
    int64_t step = state.at("step").get<int64_t>();
    log_.info("resumed from " + dir.string() + " at step " + std::to_string(step));
    // The plan is global: the saved position continues with any number of ranks. The run repeats
    // the old one's steps only when the global batch (ranks x grad_accum) is unchanged.
    const int64_t old_world = state.value("world", int64_t(cluster_.world));
    const int64_t old_accum = state.value("grad_accum", c.training.grad_accum);
    if (old_world != cluster_.world || old_accum != c.training.grad_accum) {
      const int64_t before = old_world * old_accum, now = int64_t(cluster_.world) * c.training.grad_accum;
      log_.info("the checkpoint was written by " + std::to_string(old_world) + " rank(s) with training.grad_accum = " +
                std::to_string(old_accum) + "; now " + std::to_string(cluster_.world) + " with " +
                std::to_string(c.training.grad_accum) + ": the optimizer state is re-split and the data continue from "
                "the saved position, " +
                (before == now ? "with the same global batch of " + std::to_string(now) +
                                     " micro-batches per step, so the run continues as the old one would have (up to "
                                     "the rounding of the changed reduction order)"
                               : "but each step now takes " + std::to_string(now) + " micro-batches instead of " +
                                     std::to_string(before) + ", so the run does not repeat what the old one would have done"));
    }
    return step;
  }

  fs::path save(int64_t step) {
    const Config& c = job_.cfg;
    nlohmann::json state = {{"step", step},
                            {"planner", planner_->state().to_json()},
                            {"seed", c.job.seed},
                            {"job", c.job.name},
                            {"world", cluster_.world},
                            {"grad_accum", c.training.grad_accum},
                            {kIdentityKey, identity_}};
    std::vector<std::string> prune_warnings;
    auto prune = [&] {
      prune_checkpoints(c.job.dump_folder, c.checkpoint.keep, &prune_warnings);
      for (const std::string& w : prune_warnings) log_.warn(w);
    };
    if (replicas_[0]->drafter().params().sharded()) {
      fs::path dir = save_sharded_checkpoint(c.job.dump_folder, step, local_shards(), *coord_, state, &job_.drafter);
      if (coord_->rank() == 0) prune();
      return dir;
    }
    const fs::path dir = checkpoint_dir(c.job.dump_folder, step);
    if (coord_->rank() != 0) return dir;  // every rank holds the same state; rank 0 writes it
    Replica& r = *replicas_[0];
    ContextScope s(r.context());
    save_checkpoint(c.job.dump_folder, step, r.drafter().params(), r.optimizer(), state, &job_.drafter);
    prune();
    return dir;
  }

  void start_workers() {
    for (size_t w = 0; w < replicas_.size(); ++w) {
      threads_.push_back(std::make_unique<WorkerThread>([this, w] { worker_step(w); }));
    }
  }

  // On worker w's thread: stage and run each micro-batch, then the update, which gathers every
  // rank's record. No allocation.
  void worker_step(size_t w) {
    Replica& r = *replicas_[w];
    std::vector<SlotFigures>& figures = figures_[w];
    for (size_t j = 0; j < slots_[w].size(); ++j) {
      Slot& slot = slots_[w][j];
      size_t b = size_t(slot.bucket);
      {
        ContextScope s(r.context());
        r.step(b).stage(slot.host);
      }
      if (online_) r.run_target(b);
      r.run_train(b, j + 1 == slots_[w].size());
      ContextScope s(r.context());
      r.step(b).read_result(slot.result);
      SlotFigures& f = figures[j];
      f.loss = slot.result.loss;
      f.bucket = slot.bucket;
      std::memcpy(f.sums, slot.result.sums, sizeof f.sums);
      f.tokens = slot.tokens;
    }
    write_step_record(r.update().record(), stop_flag_, figures.data(), int64_t(figures.size()));
    r.run_update();
    ContextScope s(r.context());
    r.update().read(stats_[w].data());
    if (hooks_.after_update) hooks_.after_update(int(w), stats_[w].data());
  }

  void report_weights(int64_t step) {
    if (!hooks_.weights) return;
    std::vector<ReplicaWeights> all;
    for (auto& r : replicas_) {
      ContextScope s(r->context());
      const ParameterStore& p = r->drafter().params();
      all.push_back({p.flat_master().to_floats(), p.flat_compute().to_floats()});
    }
    hooks_.weights(step, all);
  }

  // Main thread: the next W*k micro-batches of the plan, in (rank, micro-batch) order; this
  // trainer fills the slots of its own ranks and skips the others'.
  void prepare_step() {
    const Config& c = job_.cfg;
    const int L = int(slots_.size());
    for (int rank = 0; rank < cluster_.world; ++rank) {
      const int w = rank - cluster_.first_rank;
      for (int64_t j = 0; j < c.training.grad_accum; ++j) {
        MicroBatch mb = planner_->next();
        if (w < 0 || w >= L) continue;
        Slot& slot = slots_[size_t(w)][size_t(j)];
        const Bucket& bucket = c.buckets[size_t(mb.bucket)];
        slot.bucket = mb.bucket;
        slot.host.resize(bucket, job_.drafter.num_features() * job_.drafter.hidden_size, !online_);
        std::vector<Sequence> seqs;
        for (int64_t i : mb.sequences) seqs.push_back(truncate_sequence(train_->get(i), bucket.seq));
        std::mt19937_64 rng(mb.anchor_seed(c.job.seed));
        slot.tokens = fill_batch(seqs, bucket, job_.drafter.block_size, rng,
                                 {slot.host.input_ids, slot.host.loss_mask, slot.host.anchors, slot.host.keep});
        if (!online_) fill_hidden_batch(*hidden_, mb.sequences, bucket.seq, bucket.batch, slot.host.hidden);
      }
    }
  }

  // Figures of the step from the gathered records: means over the k*W micro-batches in (rank,
  // micro-batch) order, as a one-process run computes them.
  StepRecord summarize(int64_t step, double seconds) {
    read_step_records(replicas_[0]->update().records(), cluster_.world, job_.cfg.training.grad_accum, gathered_);
    StepRecord r = step_figures(gathered_, job_.cfg.buckets);
    r.step = step;
    r.grad_norm = stats_[0][0];
    r.lr = stats_[0][1];
    // After the reduction every rank holds the same gradients, so every rank reports the same norm.
    for (size_t w = 1; w < stats_.size(); ++w)
      DF_CHECK(std::memcmp(stats_[w].data(), stats_[0].data(), sizeof(float) * 2) == 0 || std::isnan(stats_[0][0]),
               "workers disagree after the gradient all-reduce at step " << step << ": rank " << w << " reports grad norm "
                                                                          << stats_[w][0] << ", rank 0 " << stats_[0][0]
                                                                          << " (a communicator bug; please report it)");
    r.step_ms = seconds * 1000;
    r.tokens_per_s = double(gathered_.tokens) / seconds / double(cluster_.world);
    r.memory_mib = memory_mib_;
    return r;
  }

  EvalResult evaluate_now(const std::string& what, int64_t step) {
    EvalResult e = evaluate(*replicas_[0], *eval_, parse_overflow_policy(job_.cfg.data.overflow, "data.overflow"),
                            [&](int64_t done, int64_t total) {
                              log_.progress(what + ": " + std::to_string(done) + "/" + std::to_string(total) + " batches");
                            });
    char buf[256];
    std::snprintf(buf, sizeof buf, "%s: loss %.4f  accuracy %.4f  tau %.4f  (%lld blocks, %lld tokens, %lld sequences)",
                  what.c_str(), e.loss, e.accuracy, e.tau, (long long)e.blocks, (long long)e.tokens,
                  (long long)e.sequences);
    log_.info(buf);
    nlohmann::json j = e.to_json();
    j["eval"] = what;
    j["step"] = step;  // optimizer steps done when measured (scripts/plot.py draws eval against it)
    log_.metrics(j);
    return e;
  }

  // The real tau (speculative decoding with the current weights): a log line and a metrics record.
  void measure_spec(int64_t step, const std::string& what) {
    log_.progress("spec_tau " + what + ": decoding " + std::to_string(spec_->prompts()) + " prompts");
    SpecFigures f = spec_->measure();
    char buf[256];
    std::snprintf(buf, sizeof buf, "spec_tau %s: %.4f (micro %.4f, SGLang accept length %.4f; %lld prompts, %lld rounds)",
                  what.c_str(), f.tau, f.tau_micro, f.accept_length, (long long)f.prompts, (long long)f.rounds);
    log_.info(buf);
    log_.metrics({{"step", step}, {"eval", "spec_tau " + what}, {"spec_tau", f.tau}, {"spec_tau_micro", f.tau_micro},
                  {"spec_accept_length", f.accept_length}, {"spec_histogram", f.histogram}, {"spec_rounds", f.rounds}});
  }

  // The steps since the last log line: figures are their means (tokens/s over their time).
  struct Interval {
    int n = 0;
    double loss = 0, accuracy = 0, tau = 0, grad_norm = 0, ms = 0;
    int64_t tokens = 0;
    void add(const StepRecord& r, int64_t step_tokens) {
      ++n;
      loss += r.loss;
      accuracy += r.accuracy;
      tau += r.tau;
      grad_norm += r.grad_norm;
      ms += r.step_ms;
      tokens += step_tokens;
    }
    StepRecord mean(StepRecord last, size_t workers) const {
      last.loss = loss / n;
      last.accuracy = accuracy / n;
      last.tau = tau / n;
      last.grad_norm = grad_norm / n;
      last.step_ms = ms / n;
      last.tokens_per_s = double(tokens) / (ms / 1000) / double(workers);
      last.tokens = tokens;
      return last;
    }
  };

  struct Slot {
    int bucket = 0;
    int64_t tokens = 0;
    HostBatch host;
    StepResult result;
  };

  TrainHooks hooks_;
  ProcessGroup* pg_ = nullptr;
  TrainLog log_;
  ClusterSpec cluster_;
  LocalCoordinator local_coord_;
  Coordinator* coord_ = nullptr;
  Job job_;
  nlohmann::ordered_json identity_;  // saved with every checkpoint, checked on resume
  std::unique_ptr<Dataset> train_, eval_;
  std::unique_ptr<HiddenDataset> hidden_;
  std::unique_ptr<BatchPlanner> planner_;
  bool online_ = true;
  Communicator* comm_ = nullptr;
  std::unique_ptr<Communicator> own_comm_;
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<SpecMonitor> spec_;  // with eval.spec_prompts; destroyed before the replicas
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::vector<std::vector<Slot>> slots_;
  std::vector<std::vector<SlotFigures>> figures_;
  std::vector<std::array<float, 2>> stats_;
  GatheredStep gathered_;
  bool stop_flag_ = false;
  double startup_ms_ = 0, memory_mib_ = 0;
};
}  // namespace

TrainResult run_training(const Config& cfg, const TrainHooks& hooks, const ClusterSpec* cluster) {
  // A launched process: its group outlives the trainer, so that after any failure the process
  // ends in pg->fail (one error line, status 1) before destroying anything that holds the GPU.
  std::unique_ptr<ProcessGroup> pg = join_if_launched(cfg, cluster);
  std::unique_ptr<Trainer> t;
  try {
    t = std::make_unique<Trainer>(cfg, hooks, cluster, pg.get());
    return t->run();
  } catch (const std::exception& e) {
    if (pg) pg->fail(e.what());  // does not return
    if (t) t->fail(e.what());
    else if (cluster && cluster->coord) cluster->coord->report_failure(e.what());
    if (cluster && cluster->comm) cluster->comm->abort();  // ranks waiting in a collective return
    throw;
  }
}

void request_training_stop() { g_stop_signal.store(SIGTERM); }

}  // namespace dflash

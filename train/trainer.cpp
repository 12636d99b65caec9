// The training loop: resume, then steps of k micro-batches on each of W ranks followed by the
// update, with logging, evaluation, checkpoints and a clean stop; trainer_startup.cpp builds the
// Trainer it runs (record, seal, report). The ranks are this process's worker threads, or one rank
// per process of a run launched by torchrun or srun (train/cluster.h); either way every rank takes
// its micro-batches from the one plan.
#include "train/trainer.h"

#include <array>
#include <atomic>
#include <chrono>
#include <csignal>
#include <cmath>
#include <cstring>

#include "data/anchors.h"
#include "train/checkpoint.h"
#include "train/data_fingerprint.h"
#include "train/folder_lock.h"
#include "train/run_identity.h"
#include "train/sharded_checkpoint.h"
#include "train/trackers.h"
#include "train/trainer_internal.h"

namespace dflash {

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
}  // namespace

namespace trainer_detail {

nlohmann::json LogInterval::to_json() const {
  return {{"steps", n},         {"loss", loss}, {"accuracy", accuracy}, {"tau", tau},
          {"grad_norm", grad_norm}, {"ms", ms},     {"tokens", tokens}};
}

LogInterval LogInterval::from_json(const nlohmann::json& j) {
  LogInterval i;
  i.n = j.value("steps", 0);
  i.loss = j.value("loss", 0.0);
  i.accuracy = j.value("accuracy", 0.0);
  i.tau = j.value("tau", 0.0);
  i.grad_norm = j.value("grad_norm", 0.0);
  i.ms = j.value("ms", 0.0);
  i.tokens = j.value("tokens", int64_t(0));
  return i;
}

TrainResult Trainer::run() {
  const Config& c = job_.cfg;
  const bool root = coord_->rank() == 0;
  TrainResult result;
  int64_t step = resume();
  result.start_step = step;
  const int64_t total = c.training.steps;
  // metrics.jsonl continues from the resumed step; a measurement of that step the stopped run
  // wrote is not repeated, one it had not written yet (after the checkpoint) is made now.
  const std::string kept = coord_->broadcast(c.checkpoint.resume ? log_.resume_at(step, resumed_unwritten_) : "");
  const int64_t resumed_at = step;
  auto recorded = [&](const char* kind, int64_t at) {
    return at == resumed_at && kept.find(std::string(" ") + kind + " ") != std::string::npos;
  };
  // Written once the resume is accepted: a refused resume leaves the folder as it was.
  if (root && startup_report_) write_startup_json(c.job.dump_folder, *startup_report_);
  // Rank 0's experiment trackers follow metrics.jsonl until run() ends, however it ends.
  TrackerOptions tracking;
  tracking.restart = !c.checkpoint.resume;
  const std::unique_ptr<TrackerFollower> trackers =
      root ? start_trackers(c, tracking, [this](const std::string& s) { log_.warn(s); }) : nullptr;
  report_weights(step);
  if (eval_ && step == 0 && root && !recorded("eval", step)) result.before = evaluate_now("eval before training", step);
  if (spec_ && step == 0 && !recorded("spec", step)) measure_spec(step, "before training");
  if (eval_ && root && step > 0 && step < total && c.training.eval_every > 0 && step % c.training.eval_every == 0 &&
      !recorded("eval", step))
    evaluate_now("eval at step " + std::to_string(step), step);
  if (spec_ && step > 0 && step < total && c.eval.spec_every > 0 && step % c.eval.spec_every == 0 &&
      !recorded("spec", step))
    measure_spec(step, "at step " + std::to_string(step));
  SignalGuard signals;
  start_workers();
  auto t_start = Clock::now();
  int64_t first = step;
  bool saved_here = false;
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
    interval_.add(r, gathered_.tokens);  // continues the resumed checkpoint's
    report_weights(step);
    if (hooks_.after_step) hooks_.after_step(step);
    const bool log_step = step % c.metrics.log_every == 0 || step == total || step == 1;
    if (log_step) {
      log_.record(interval_.mean(r, size_t(cluster_.world)), total);
      interval_ = LogInterval();
    } else if (step == first + 1) {  // a line after a resume; the record waits for the interval's end
      log_.info(interval_.mean(r, size_t(cluster_.world)).line(total));
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
      std::string who = sig == SIGINT   ? "SIGINT"
                        : sig             ? "SIGTERM"
                        : log_.failed()   ? "a failed metrics write"
                                          : "a stop request";
      if (cluster_.world > 1 && !gathered_.stopping.empty())
        who += " (the stop flag of rank " + std::to_string(gathered_.stopping[0]) + ")";
      log_.info("received " + who + " at step " + std::to_string(step) + ": writing a checkpoint and stopping");
      if (!saved_here || log_.failed()) result.last_checkpoint = save(step);  // keeps the unwritten records
      result.interrupted = true;
      break;
    }
  }
  result.steps_done = step;
  threads_.clear();
  if (!result.interrupted) {
    if (step > first || !result.last_checkpoint.empty() || step == 0) result.last_checkpoint = save(step);
    if (eval_ && root && !recorded("eval", step)) result.after = evaluate_now("eval after training", step);
    if (spec_ && !recorded("spec", step)) measure_spec(step, "after training");
    if (log_.failed()) result.last_checkpoint = save(step);  // keeps the unwritten records
    if (result.before && result.after)
      log_.info("tau estimate on the eval set: " + std::to_string(result.before->tau).substr(0, 5) + " before training, " +
                std::to_string(result.after->tau).substr(0, 5) + " after");
  } else {
    log_.info("stopped at step " + std::to_string(step) + "; resume with the same command");
  }
  log_.info("checkpoint: " + result.last_checkpoint.string());
  DF_CHECK(!log_.failed(), log_.failure() << "; the run stopped after writing the checkpoint "
                                          << result.last_checkpoint.string()
                                          << ", which keeps the records not written; fix: free space on that file "
                                             "system (or repair the disk), then resume with the same command");
  coord_->barrier();  // no rank leaves while another may still need it
  if (pg_) pg_->finish();
  return result;
}

void Trainer::fail(const std::string& message) {
  if (cluster_.coord) cluster_.coord->report_failure(message);
}

// Waits for every worker; a failed one aborts the communicator so the others return. Another
// rank's failure is reported as such (it is the cause).
void Trainer::wait_workers() {
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

bool Trainer::stop_requested() const {
  return g_stop_signal.load() != 0 || log_.failed() || (hooks_.stop_requested && hooks_.stop_requested());
}

std::vector<LocalShard> Trainer::local_shards() {
  std::vector<LocalShard> out;
  for (auto& r : replicas_) out.push_back({r->options().rank, &r->drafter().params(), &r->optimizer()});
  return out;
}

// Newest complete checkpoint (when enabled): parameters, moments, step and data position. Rank 0
// chooses it; every rank loads its part.
int64_t Trainer::resume() {
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
  if (coord_->rank() == 0) resumed_unwritten_ = state.value("metrics_unwritten", std::vector<std::string>{});
  interval_ = LogInterval::from_json(state.value("log_interval", nlohmann::json::object()));
  const PlannerState saved = PlannerState::from_json(state.at("planner"), (dir / "state.json").string());
  // Rank 0 compares the data's fingerprints; every rank follows its verdict.
  const std::string verdict = coord_->rank() == 0 ? check_data_unchanged(c, state, data_fingerprint_, dir) : "";
  const bool changed = coord_->broadcast(verdict) == "changed";
  if (changed) {
    PlannerState next = planner_->state();
    next.epoch = saved.epoch + 1;
    planner_->restore(next);
    log_.info("data.allow_changed = true: the data order starts again at the beginning of epoch " +
              std::to_string(next.epoch));
  } else {
    planner_->restore(saved);
  }
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

fs::path Trainer::save(int64_t step) {
  const Config& c = job_.cfg;
  nlohmann::json state = {{"step", step},
                          {"planner", planner_->state().to_json()},
                          {"seed", c.job.seed},
                          {"job", c.job.name},
                          {"world", cluster_.world},
                          {"grad_accum", c.training.grad_accum},
                          {kIdentityKey, identity_}};
  if (!data_fingerprint_.is_null()) state[kDataFingerprintKey] = data_fingerprint_;
  if (!log_.unwritten().empty()) state["metrics_unwritten"] = log_.unwritten();
  if (interval_.n > 0) state["log_interval"] = interval_.to_json();
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

void Trainer::start_workers() {
  for (size_t w = 0; w < replicas_.size(); ++w) {
    threads_.push_back(std::make_unique<WorkerThread>([this, w] { worker_step(w); }));
  }
}

// On worker w's thread: stage and run each micro-batch, then the update, which gathers every
// rank's record. No allocation.
void Trainer::worker_step(size_t w) {
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

void Trainer::report_weights(int64_t step) {
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
void Trainer::prepare_step() {
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
StepRecord Trainer::summarize(int64_t step, double seconds) {
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

EvalResult Trainer::evaluate_now(const std::string& what, int64_t step) {
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
void Trainer::measure_spec(int64_t step, const std::string& what) {
  log_.progress("spec_tau " + what + ": decoding " + std::to_string(spec_->prompts()) + " prompts");
  SpecFigures f = spec_->measure();
  char buf[256];
  std::snprintf(buf, sizeof buf, "spec_tau %s: %.4f (micro %.4f, SGLang accept length %.4f; %lld prompts, %lld rounds)",
                what.c_str(), f.tau, f.tau_micro, f.accept_length, (long long)f.prompts, (long long)f.rounds);
  log_.info(buf);
  log_.metrics({{"step", step}, {"eval", "spec_tau " + what}, {"spec_tau", f.tau}, {"spec_tau_micro", f.tau_micro},
                {"spec_accept_length", f.accept_length}, {"spec_histogram", f.histogram}, {"spec_rounds", f.rounds}});
}

}  // namespace trainer_detail

TrainResult run_training(const Config& cfg, const TrainHooks& hooks, const ClusterSpec* cluster) {
  // A launched process: its group outlives the trainer, so that after any failure the process
  // ends in pg->fail (one error line, status 1) before destroying anything that holds the GPU.
  std::unique_ptr<ProcessGroup> pg = trainer_detail::join_if_launched(cfg, cluster);
  std::optional<FolderLock> lock;  // held until the trainer is gone
  std::unique_ptr<trainer_detail::Trainer> t;
  try {
    // Before any rank writes to the dump folder: rank 0 holds its lock, or every rank stops.
    lock = lock_dump_folder(cfg.job.dump_folder, cluster ? cluster->coord : pg ? &pg->coordinator() : nullptr);
    t = std::make_unique<trainer_detail::Trainer>(cfg, hooks, cluster, pg.get());
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

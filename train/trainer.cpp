// The training loop: startup (record, seal, report), resume, then steps of k micro-batches on W
// workers followed by the update, with logging, evaluation, checkpoints and a clean stop.
#include "train/trainer.h"

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
#include "train/export.h"
#include "train/job.h"
#include "train/spec_monitor.h"
#include "train/run_identity.h"
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

class Trainer {
 public:
  Trainer(const Config& cfg, const TrainHooks& hooks)
      : hooks_(hooks), log_((ensure_writable_dir(cfg.job.dump_folder, "job.dump_folder"), cfg.job.dump_folder),
                            cfg.metrics.progress) {
    LogFn info = [this](const std::string& s) { log_.info(s); };
    job_ = setup_job(cfg, info);
    const Config& c = job_.cfg;
    info("dflash-train: job '" + c.job.name + "', dump folder " + c.job.dump_folder.string());
    info("devices: " + std::to_string(job_.devices.size()) + " worker(s) on " + job_.devices[0].str() + " (" +
         job_.device_note + ")");
    check_drafter_init(c);
    identity_ = job_identity(job_);
    if (c.checkpoint.resume)  // before any startup work: a checkpoint of another run is refused by key
      if (auto dir = latest_complete_checkpoint(c.job.dump_folder))
        check_resume_identity(*dir, identity_, [this](const std::string& s) { log_.warn(s); });
    train_ = open_train_data(job_, info);
    eval_ = open_eval_data(job_, info);
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
    if (replicas_[0]->engine()) {
      StartupReport report = make_startup_report(*replicas_[0]->engine(), int(replicas_.size()), startup_ms_);
      log_.info("recorded programs (each worker):\n" + format_startup_table(report));
      write_startup_json(c.job.dump_folder, report);
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
    TrainResult result;
    int64_t step = resume();
    result.start_step = step;
    report_weights(step);
    if (eval_ && step == 0) result.before = evaluate_now("eval before training", step);
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
      int64_t tokens = prepare_step();
      for (auto& t : threads_) t->start();
      for (auto& t : threads_) t->wait();
      ++step;
      saved_here = false;
      StepRecord r = summarize(step, tokens, seconds_since(t0));
      if (!std::isfinite(r.loss) || !std::isfinite(r.grad_norm))
        DF_FAIL("training diverged at step " << step << " (bucket " << r.bucket << "): loss " << r.loss
                                             << ", gradient norm " << r.grad_norm
                                             << ". The parameters of this step are not saved; resume from the last "
                                                "checkpoint with a lower training.lr or training.max_grad_norm, and "
                                                "check the data");
      interval.add(r, tokens);
      report_weights(step);
      if (hooks_.after_step) hooks_.after_step(step);
      if (step % c.metrics.log_every == 0 || step == total || step == first + 1) {
        log_.record(interval.mean(r, replicas_.size()), total);
        interval = Interval();
      }
      double per_step = seconds_since(t_start) / double(step - first);
      log_.progress("step " + std::to_string(step) + "/" + std::to_string(total) + "  loss " +
                    std::to_string(r.loss).substr(0, 6) + "  ETA " + format_duration(per_step * double(total - step)));
      if (c.checkpoint.every > 0 && step % c.checkpoint.every == 0 && step < total) {
        result.last_checkpoint = save(step);
        saved_here = true;
      }
      if (eval_ && c.training.eval_every > 0 && step % c.training.eval_every == 0 && step < total)
        evaluate_now("eval at step " + std::to_string(step), step);
      if (spec_ && c.eval.spec_every > 0 && step % c.eval.spec_every == 0 && step < total)
        measure_spec(step, "at step " + std::to_string(step));
      if (int sig = g_stop_signal.load()) {
        log_.info(std::string("received ") + (sig == SIGINT ? "SIGINT" : "SIGTERM") + " at step " +
                  std::to_string(step) + ": writing a checkpoint and stopping");
        if (!saved_here) result.last_checkpoint = save(step);
        result.interrupted = true;
        break;
      }
    }
    result.steps_done = step;
    threads_.clear();
    if (!result.interrupted) {
      if (step > first || !result.last_checkpoint.empty() || step == 0) result.last_checkpoint = save(step);
      if (eval_) result.after = evaluate_now("eval after training", step);
      if (spec_) measure_spec(step, "after training");
      if (result.before && result.after)
        log_.info("tau estimate on the eval set: " + std::to_string(result.before->tau).substr(0, 5) + " before training, " +
                  std::to_string(result.after->tau).substr(0, 5) + " after");
    } else {
      log_.info("stopped at step " + std::to_string(step) + "; resume with the same command");
    }
    log_.info("checkpoint: " + result.last_checkpoint.string());
    return result;
  }

 private:
  void build_replicas() {
    const Config& c = job_.cfg;
    const int W = int(job_.devices.size());
    if (W > 1 && job_.devices[0].is_cuda()) {
#ifdef DFLASH_NCCL
      std::vector<int> ids;
      for (const Device& d : job_.devices) ids.push_back(d.index);
      comm_ = std::make_unique<NcclCommunicator>(ids);
#else
      DF_FAIL("several GPUs need NCCL, which this build did not find; use one GPU (runtime.devices = \"cuda:0\")");
#endif
    }
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
    int64_t padded = 0;
    for (int w = 0; w < W; ++w) {
      ReplicaOptions o;
      o.device = job_.devices[size_t(w)];
      o.rank = w;
      o.spec = job_.drafter;
      o.target_dir = c.target.path;
      o.buckets = c.buckets;
      o.online = online_;
      o.train = true;
      o.eval = eval_ != nullptr;
      o.graphs = c.runtime.graphs;
      o.checkpointing = c.training.checkpointing;
      o.grad_accum = c.training.grad_accum;
      o.chunk_rows = c.training.chunk_rows;
      o.init_seed = c.job.seed;
      o.init_std = c.drafter.init_std;
      o.optimizer = opt;
      if (w == 0 && W > 1 && o.device.is_cpu()) {
        // The communicator needs the flat gradient size, known once a drafter exists.
        Context probe(o.device);
        ContextScope s(probe);
        padded = ParameterStore(drafter_param_specs(o.spec)).padded_numel();
        thread_comm_ = new ThreadCommunicator(W, padded);
        comm_.reset(thread_comm_);
      }
      o.comm = comm_.get();
      log_.progress("loading worker " + std::to_string(w) + " on " + o.device.str());
      replicas_.push_back(std::make_unique<Replica>(o));
      Replica& r = *replicas_.back();
      if (thread_comm_) {
        ContextScope s(r.context());
        thread_comm_->register_buffer(w, r.drafter().params().flat_grads().data<float>());
      }
      if (!c.drafter.init.empty()) {
        ContextScope s(r.context());
        load_drafter_weights(c.drafter.init, job_.drafter, r.drafter().params());
        if (w == 0) log_.info("warm start from " + c.drafter.init.string());
      }
    }
    const size_t available = worker_memory_bytes(job_);
    for (int w = 0; w < W; ++w) {
      replicas_[size_t(w)]->build(available, [&](const std::string& what) {
        log_.progress("startup: worker " + std::to_string(w) + ": " + what);
      });
    }
    log_.done_progress();
    slots_.assign(size_t(W), std::vector<Slot>(size_t(c.training.grad_accum)));
    stats_.assign(size_t(W), {0.0f, 0.0f});
  }

  // Newest complete checkpoint (when enabled): parameters, moments, step and data position.
  int64_t resume() {
    const Config& c = job_.cfg;
    if (!c.checkpoint.resume) return 0;
    std::vector<std::string> warnings;
    std::optional<fs::path> dir = latest_complete_checkpoint(c.job.dump_folder, &warnings);
    for (const std::string& w : warnings) log_.warn(w);
    if (!dir) return 0;
    nlohmann::json state;
    for (auto& r : replicas_) {
      ContextScope s(r->context());
      state = load_checkpoint(*dir, r->drafter().params(), r->optimizer());
    }
    planner_->restore(PlannerState::from_json(state.at("planner"), (*dir / "state.json").string()));
    int64_t step = state.at("step").get<int64_t>();
    log_.info("resumed from " + dir->string() + " at step " + std::to_string(step));
    return step;
  }

  fs::path save(int64_t step) {
    const Config& c = job_.cfg;
    nlohmann::json state = {{"step", step}, {"planner", planner_->state().to_json()}, {"seed", c.job.seed},
                            {"job", c.job.name}, {kIdentityKey, identity_}};
    Replica& r = *replicas_[0];
    ContextScope s(r.context());
    save_checkpoint(c.job.dump_folder, step, r.drafter().params(), r.optimizer(), state, &job_.drafter);
    std::vector<std::string> prune_warnings;
    prune_checkpoints(c.job.dump_folder, c.checkpoint.keep, &prune_warnings);
    for (const std::string& w : prune_warnings) log_.warn(w);
    return checkpoint_dir(c.job.dump_folder, step);
  }

  void start_workers() {
    for (size_t w = 0; w < replicas_.size(); ++w) {
      threads_.push_back(std::make_unique<WorkerThread>([this, w] { worker_step(w); }));
    }
  }

  // On worker w's thread: stage and run each micro-batch, then the update. No allocation.
  void worker_step(size_t w) {
    Replica& r = *replicas_[w];
    for (Slot& slot : slots_[w]) {
      size_t b = size_t(slot.bucket);
      {
        ContextScope s(r.context());
        r.step(b).stage(slot.host);
      }
      if (online_) r.run_target(b);
      r.run_train(b);
      ContextScope s(r.context());
      r.step(b).read_result(slot.result);
    }
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

  // Main thread: the next k micro-batches of every worker into their slots; real tokens.
  int64_t prepare_step() {
    const Config& c = job_.cfg;
    int64_t tokens = 0;
    for (auto& worker_slots : slots_)
      for (Slot& slot : worker_slots) {
        MicroBatch mb = planner_->next();
        const Bucket& bucket = c.buckets[size_t(mb.bucket)];
        slot.bucket = mb.bucket;
        slot.host.resize(bucket, job_.drafter.num_features() * job_.drafter.hidden_size, !online_);
        std::vector<Sequence> seqs;
        for (int64_t i : mb.sequences) seqs.push_back(truncate_sequence(train_->get(i), bucket.seq));
        std::mt19937_64 rng(mb.anchor_seed(c.job.seed));
        tokens += fill_batch(seqs, bucket, job_.drafter.block_size, rng,
                             {slot.host.input_ids, slot.host.loss_mask, slot.host.anchors, slot.host.keep});
        if (!online_) fill_hidden_batch(*hidden_, mb.sequences, bucket.seq, bucket.batch, slot.host.hidden);
      }
    return tokens;
  }

  // Figures of the step: means over the k*W micro-batches in (rank, micro-batch) order.
  StepRecord summarize(int64_t step, int64_t tokens, double seconds) {
    StepRecord r;
    r.step = step;
    double n = 0, tau_n = 0;
    std::vector<int> used;
    for (const auto& worker_slots : slots_)
      for (const Slot& s : worker_slots) {
        r.loss += s.result.loss;
        r.accuracy += s.result.accuracy();
        if (s.result.sums[5] > 0) {
          r.tau += s.result.tau();
          tau_n += 1;
        }
        n += 1;
        if (std::find(used.begin(), used.end(), s.bucket) == used.end()) used.push_back(s.bucket);
      }
    r.loss /= n;
    r.accuracy /= n;
    r.tau = tau_n > 0 ? r.tau / tau_n : 0.0;
    r.grad_norm = stats_[0][0];
    r.lr = stats_[0][1];
    // After the all-reduce every rank holds the same gradients, so every rank reports the same norm.
    for (size_t w = 1; w < stats_.size(); ++w)
      DF_CHECK(std::memcmp(stats_[w].data(), stats_[0].data(), sizeof(float) * 2) == 0 || std::isnan(stats_[0][0]),
               "workers disagree after the gradient all-reduce at step " << step << ": rank " << w << " reports grad norm "
                                                                          << stats_[w][0] << ", rank 0 " << stats_[0][0]
                                                                          << " (a communicator bug; please report it)");
    r.step_ms = seconds * 1000;
    r.tokens_per_s = double(tokens) / seconds / double(replicas_.size());
    std::sort(used.begin(), used.end(), [&](int a, int b) { return job_.cfg.buckets[size_t(a)].seq < job_.cfg.buckets[size_t(b)].seq; });
    for (int b : used) r.bucket += (r.bucket.empty() ? "" : "+") + std::to_string(job_.cfg.buckets[size_t(b)].seq);
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
    HostBatch host;
    StepResult result;
  };

  TrainHooks hooks_;
  TrainLog log_;
  Job job_;
  nlohmann::ordered_json identity_;  // saved with every checkpoint, checked on resume
  std::unique_ptr<Dataset> train_, eval_;
  std::unique_ptr<HiddenDataset> hidden_;
  std::unique_ptr<BatchPlanner> planner_;
  bool online_ = true;
  std::unique_ptr<Communicator> comm_;
  ThreadCommunicator* thread_comm_ = nullptr;  // comm_ when the workers are CPU threads
  std::vector<std::unique_ptr<Replica>> replicas_;
  std::unique_ptr<SpecMonitor> spec_;  // with eval.spec_prompts; destroyed before the replicas
  std::vector<std::unique_ptr<WorkerThread>> threads_;
  std::vector<std::vector<Slot>> slots_;
  std::vector<std::array<float, 2>> stats_;
  double startup_ms_ = 0, memory_mib_ = 0;
};
}  // namespace

TrainResult run_training(const Config& cfg, const TrainHooks& hooks) {
  Trainer t(cfg, hooks);
  return t.run();
}

void request_training_stop() { g_stop_signal.store(SIGTERM); }

}  // namespace dflash

// The Trainer behind run_training (train/trainer.h), in two files: trainer_startup.cpp builds it
// (the job and its data, the replicas and their recorded programs, the startup report) and
// trainer.cpp runs it (resume, the steps, logging, evaluation, checkpoints, a clean stop). Internal
// to train/trainer*.cpp.
#pragma once
#include <array>
#include <chrono>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/data.h"
#include "data/shards.h"
#include "dist/comm.h"
#include "dist/coordinator.h"
#include "graphs/startup_report.h"
#include "graphs/worker.h"
#include "train/bucket_step.h"
#include "train/cluster.h"
#include "train/eval.h"
#include "train/job.h"
#include "train/replica.h"
#include "train/sharded_checkpoint.h"
#include "train/spec_monitor.h"
#include "train/step_record.h"
#include "train/train_log.h"
#include "train/trainer.h"

namespace dflash::trainer_detail {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// This process's place in a run launched by torchrun or srun; null for one process, or when the
// caller gives the cluster (tests). trainer_startup.cpp.
std::unique_ptr<ProcessGroup> join_if_launched(const Config& cfg, const ClusterSpec* given);

// The steps since the last log line: the record at its end holds their means (tokens/s over
// their time). Checkpoints keep it, so that a run resumed inside an interval logs the record an
// uninterrupted run would (doubles survive JSON exactly).
struct LogInterval {
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
  nlohmann::json to_json() const;  // state.json's "log_interval" (trainer.cpp)
  static LogInterval from_json(const nlohmann::json& j);  // {} (older checkpoints): empty
};

class Trainer {
 public:
  // trainer_startup.cpp: sets up the job and its data, builds the replicas. pg: this process's
  // place in a launched run (it outlives the trainer), or null.
  Trainer(const Config& cfg, const TrainHooks& hooks, const ClusterSpec* given, ProcessGroup* pg);

  // trainer.cpp
  TrainResult run();
  void fail(const std::string& message);

 private:
  // trainer_startup.cpp
  void build_replicas();

  // trainer.cpp: the workers and the steps
  void wait_workers();
  bool stop_requested() const;
  void start_workers();
  void worker_step(size_t w);
  void report_weights(int64_t step);
  void prepare_step();
  StepRecord summarize(int64_t step, double seconds);
  // trainer.cpp: checkpoints
  std::vector<LocalShard> local_shards();
  int64_t resume();
  fs::path save(int64_t step);
  // trainer.cpp: evaluation
  EvalResult evaluate_now(const std::string& what, int64_t step);
  void measure_spec(int64_t step, const std::string& what);

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
  nlohmann::json data_fingerprint_;  // rank 0: of data.train and data.eval, saved and checked likewise
  std::vector<std::string> resumed_unwritten_;  // rank 0: records the resumed checkpoint kept for metrics.jsonl
  LogInterval interval_;  // every rank: the steps since the last log line, saved with each checkpoint
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
  std::optional<StartupReport> startup_report_;  // startup.json, written after the resume
};

}  // namespace dflash::trainer_detail

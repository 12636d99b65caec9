// What training reports: a log line per interval, metrics.jsonl records, and a live progress
// line on a terminal (startup recording, training with ETA, evaluation).
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <string>

#include <nlohmann/json.hpp>

namespace dflash {

// One log line: the figures of the steps since the previous line (their means; lr and bucket
// are the last step's).
struct StepRecord {
  int64_t step = 0;  // optimizer steps done
  double loss = 0, accuracy = 0, tau = 0, grad_norm = 0, lr = 0;
  int64_t tokens = 0;       // real (unpadded) tokens of all k*W micro-batches of the logged steps
  double tokens_per_s = 0;  // real tokens per second per device
  double step_ms = 0;
  std::string bucket;       // the buckets the step's micro-batches used, e.g. "64" or "64+128"
  double memory_mib = 0;    // arena + persistent per worker
  nlohmann::json to_json() const;
  std::string line(int64_t total_steps) const;
};

class TrainLog {
 public:
  // metrics.jsonl in dump_folder is appended to (a resumed run continues it). Only rank 0 of a
  // run over several processes logs (root); the others print warnings only.
  TrainLog(const std::filesystem::path& dump_folder, bool progress, bool root = true);
  ~TrainLog();
  void info(const std::string& line);     // a log line (clears the progress line first)
  void warn(const std::string& line);     // to stderr, prefixed "warning: "
  void record(const StepRecord& r, int64_t total_steps);  // log line + metrics.jsonl
  void metrics(const nlohmann::json& j);  // any other record for metrics.jsonl (eval results)
  // A transient status line (only on a terminal); replaced by the next one or a log line.
  void progress(const std::string& status);
  void done_progress();

 private:
  std::FILE* metrics_ = nullptr;
  bool tty_ = false;
  bool progress_shown_ = false;
  bool root_ = true;
};

std::string format_duration(double seconds);

}  // namespace dflash

// What training reports: a log line per interval, metrics.jsonl records, and a live progress
// line on a terminal (startup recording, training with ETA, evaluation).
#pragma once
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

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

// The kind of a metrics.jsonl record: "train" (no "eval" key), "spec" ("eval" begins with
// "spec_tau") or "eval". A run writes each (kind, step) at most once.
std::string record_kind(const nlohmann::json& record);

// The write(2) metrics records go through (tests inject failures).
using MetricsWrite = std::function<long(int fd, const void* data, size_t bytes)>;

class TrainLog {
 public:
  // metrics.jsonl in dump_folder is appended to (a resumed run continues it, after resume_at).
  // Only rank 0 of a run over several processes logs (root); the others print warnings only.
  // fresh (checkpoint.resume = false): an existing non-empty metrics.jsonl is refused, naming it
  // and the choices, before anything is written.
  TrainLog(const std::filesystem::path& dump_folder, bool progress, bool root = true, bool fresh = false);
  ~TrainLog();
  void info(const std::string& line);     // a log line (clears the progress line first)
  void warn(const std::string& line);     // to stderr, prefixed "warning: "
  void record(const StepRecord& r, int64_t total_steps);  // log line + metrics.jsonl
  // Any other record for metrics.jsonl (eval results). Each record is one line in one write(2).
  // A write that fails (ENOSPC, EIO, short) is cut back off the file; from then on nothing is
  // written, failed() is true and every record (that one first) is kept in unwritten().
  void metrics(const nlohmann::json& j);
  // A resumed run at `step`: cuts metrics.jsonl back to its complete records of steps <= step (a
  // torn last line and the records after the checkpoint go, with one log line saying how many),
  // then appends `unwritten` (the records the stopped run could not write; its checkpoint kept
  // them). Returns the kinds recorded at `step` itself, as " kind kind ", for every rank to share.
  std::string resume_at(int64_t step, const std::vector<std::string>& unwritten);
  bool failed() const { return !failure_.empty(); }
  const std::string& failure() const { return failure_; }  // names the file and the error
  const std::vector<std::string>& unwritten() const { return unwritten_; }
  void set_write(MetricsWrite write) { write_ = std::move(write); }
  // A transient status line (only on a terminal); replaced by the next one or a log line.
  void progress(const std::string& status);
  void done_progress();

 private:
  std::filesystem::path path_;
  int fd_ = -1;
  MetricsWrite write_;
  std::string failure_;
  std::vector<std::string> unwritten_;
  bool tty_ = false;
  bool progress_shown_ = false;
  bool root_ = true;
};

std::string format_duration(double seconds);

}  // namespace dflash

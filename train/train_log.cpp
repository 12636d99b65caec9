// TrainLog: stdout lines, a progress line on terminals, metrics.jsonl.
#include "train/train_log.h"

#include <unistd.h>

#include "runtime/error.h"

namespace dflash {

nlohmann::json StepRecord::to_json() const {
  return {{"step", step},         {"loss", loss},       {"accuracy", accuracy}, {"tau", tau},
          {"grad_norm", grad_norm}, {"lr", lr},         {"tokens", tokens}, {"tokens_per_s", tokens_per_s},
          {"step_ms", step_ms},   {"bucket", bucket}, {"memory_mib", memory_mib}};
}

std::string StepRecord::line(int64_t total_steps) const {
  char buf[320];
  std::snprintf(buf, sizeof buf,
                "step %5lld/%lld  loss %.4f  acc %.3f  tau %.3f  gnorm %.3f  lr %.2e  %.0f tok/s  %.1f ms/step  "
                "bucket %s  mem %.0f MiB",
                (long long)step, (long long)total_steps, loss, accuracy, tau, grad_norm, lr, tokens_per_s, step_ms,
                bucket.c_str(), memory_mib);
  return buf;
}

std::string format_duration(double s) {
  char buf[32];
  if (s < 60) std::snprintf(buf, sizeof buf, "%.0fs", s);
  else if (s < 3600) std::snprintf(buf, sizeof buf, "%dm%02ds", int(s) / 60, int(s) % 60);
  else std::snprintf(buf, sizeof buf, "%dh%02dm", int(s) / 3600, (int(s) % 3600) / 60);
  return buf;
}

TrainLog::TrainLog(const std::filesystem::path& dump_folder, bool progress, bool root) : root_(root) {
  if (!root) return;
  std::filesystem::path p = dump_folder / "metrics.jsonl";
  metrics_ = std::fopen(p.c_str(), "a");
  DF_CHECK(metrics_, "cannot open " << p.string() << " for appending: check that job.dump_folder is writable");
  tty_ = progress && ::isatty(STDOUT_FILENO);
}

TrainLog::~TrainLog() {
  done_progress();
  if (metrics_) std::fclose(metrics_);
}

void TrainLog::done_progress() {
  if (progress_shown_) {
    std::printf("\r\033[K");
    std::fflush(stdout);
    progress_shown_ = false;
  }
}

void TrainLog::info(const std::string& line) {
  if (!root_) return;
  done_progress();
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

void TrainLog::warn(const std::string& line) {
  done_progress();
  std::fprintf(stderr, "warning: %s\n", line.c_str());
}

void TrainLog::record(const StepRecord& r, int64_t total_steps) {
  info(r.line(total_steps));
  metrics(r.to_json());
}

void TrainLog::metrics(const nlohmann::json& j) {
  if (!metrics_) return;
  std::fprintf(metrics_, "%s\n", j.dump().c_str());
  std::fflush(metrics_);
}

void TrainLog::progress(const std::string& status) {
  if (!tty_) return;
  std::printf("\r\033[K%s", status.c_str());
  std::fflush(stdout);
  progress_shown_ = true;
}

}  // namespace dflash

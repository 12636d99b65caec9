// TrainLog: stdout lines, a progress line on terminals, metrics.jsonl.
#include "train/train_log.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

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

std::string record_kind(const nlohmann::json& record) {
  if (!record.contains("eval")) return "train";
  const nlohmann::json& e = record["eval"];
  return e.is_string() && e.get<std::string>().rfind("spec_tau", 0) == 0 ? "spec" : "eval";
}

TrainLog::TrainLog(const std::filesystem::path& dump_folder, bool progress, bool root, bool fresh) : root_(root) {
  if (!root) return;
  path_ = dump_folder / "metrics.jsonl";
  struct stat st {};
  if (fresh && ::stat(path_.c_str(), &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0)
    DF_FAIL(path_.string() << " already holds " << st.st_size
                           << " bytes of records, and checkpoint.resume = false starts a new run, which would mix "
                              "its records with them; fix: move that file away, choose another job.dump_folder, or "
                              "resume the run (checkpoint.resume = true)");
  fd_ = ::open(path_.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DF_CHECK(fd_ >= 0, "cannot open " << path_.string() << " for appending (" << std::strerror(errno)
                                    << "): check that job.dump_folder is writable");
  write_ = [](int fd, const void* data, size_t bytes) { return long(::write(fd, data, bytes)); };
  tty_ = progress && ::isatty(STDOUT_FILENO);
}

TrainLog::~TrainLog() {
  done_progress();
  if (fd_ >= 0) ::close(fd_);
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
  if (fd_ < 0) return;
  const std::string line = j.dump() + "\n";
  if (failed()) {
    unwritten_.push_back(line);
    return;
  }
  struct stat st {};
  const bool sized = ::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode);
  errno = 0;
  const long n = write_(fd_, line.data(), line.size());
  if (n == long(line.size())) return;
  const std::string error = n < 0 ? std::string(std::strerror(errno))
                                  : "short write: " + std::to_string(n) + " of " + std::to_string(line.size()) + " bytes";
  // The file stays whole records: a partial line is cut off here, else by resume_at.
  if (n > 0 && sized) (void)!::ftruncate(fd_, st.st_size);
  failure_ = "cannot write " + path_.string() + " (" + error + ")";
  unwritten_.push_back(line);
}

std::string TrainLog::resume_at(int64_t step, const std::vector<std::string>& unwritten) {
  if (fd_ < 0) return "";
  struct stat st {};
  std::string text;
  if (::fstat(fd_, &st) == 0 && S_ISREG(st.st_mode)) {
    const int in = ::open(path_.c_str(), O_RDONLY | O_CLOEXEC);
    DF_CHECK(in >= 0, "cannot read " << path_.string() << " (" << std::strerror(errno) << ") to resume it");
    text.resize(size_t(st.st_size));
    size_t got = 0;
    while (got < text.size()) {
      const ssize_t r = ::read(in, text.data() + got, text.size() - got);
      if (r <= 0) break;
      got += size_t(r);
    }
    ::close(in);
    text.resize(got);
  }
  // The kept prefix: complete lines that parse, up to the first record past `step`.
  auto parse_line = [&](size_t at, size_t nl) {
    nlohmann::json j = nlohmann::json::parse(text.begin() + long(at), text.begin() + long(nl), nullptr, false);
    const bool ok = !j.is_discarded() && j.is_object() && j.contains("step") && j["step"].is_number_integer();
    return ok ? j : nlohmann::json();
  };
  size_t keep = 0;
  std::string kinds = " ";
  for (size_t at = 0, nl; at < text.size() && (nl = text.find('\n', at)) != std::string::npos; at = keep) {
    const nlohmann::json j = parse_line(at, nl);
    if (j.is_null() || j["step"].get<int64_t>() > step) break;
    if (j["step"].get<int64_t>() == step) kinds += record_kind(j) + " ";
    keep = nl + 1;
  }
  size_t after = 0;
  bool torn = false;
  for (size_t at = keep; at < text.size();) {
    const size_t nl = text.find('\n', at);
    if (nl == std::string::npos || parse_line(at, nl).is_null()) torn = true;
    else ++after;
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  if (keep < text.size()) {
    DF_CHECK(::ftruncate(fd_, off_t(keep)) == 0,
             "cannot cut " << path_.string() << " back to its records up to step " << step << " ("
                           << std::strerror(errno) << "); fix: free space or check the file's permissions, then resume");
    info(path_.string() + ": removed " + std::to_string(after) + " record(s) after step " + std::to_string(step) +
         (torn ? " and a torn line" : "") + " (the checkpoint resumed is at step " +
         std::to_string(step) + "; those steps run again)");
  }
  for (const std::string& line : unwritten) {
    const nlohmann::json j = nlohmann::json::parse(line, nullptr, false);
    if (!j.is_discarded() && j.value("step", int64_t(-1)) == step) kinds += record_kind(j) + " ";
    metrics(j);
  }
  return kinds;
}

void TrainLog::progress(const std::string& status) {
  if (!tty_) return;
  std::printf("\r\033[K%s", status.c_str());
  std::fflush(stdout);
  progress_shown_ = true;
}

}  // namespace dflash

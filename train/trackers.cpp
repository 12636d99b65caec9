// Experiment trackers: finding `dflash-data`, writing the resolved config it reports as
// hyperparameters, and starting and ending the `dflash-data track` follower (train/trackers.h).
#include "train/trackers.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/fileio.h"
#include "train/config_keys.h"

extern char** environ;

namespace dflash {

namespace fs = std::filesystem;

namespace {

bool executable_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec) && ::access(p.c_str(), X_OK) == 0;
}

// The field's value as JSON, typed as in the TOML file.
nlohmann::ordered_json field_json(Config& c, const config_detail::Field& f) {
  using config_detail::Kind;
  void* p = f.at(c);
  switch (f.kind) {
    case Kind::integer: return *static_cast<int64_t*>(p);
    case Kind::optional_integer: {
      const auto& o = *static_cast<std::optional<int64_t>*>(p);
      return o ? nlohmann::ordered_json(*o) : nlohmann::ordered_json(nullptr);
    }
    case Kind::seed: return *static_cast<uint64_t*>(p);
    case Kind::number: return *static_cast<double*>(p);
    case Kind::boolean: return *static_cast<bool*>(p);
    case Kind::text: return *static_cast<std::string*>(p);
    case Kind::path: return static_cast<fs::path*>(p)->string();
    case Kind::integer_list: return *static_cast<std::vector<int64_t>*>(p);
    case Kind::text_list: return *static_cast<std::vector<std::string>*>(p);
  }
  return nullptr;
}

}  // namespace

fs::path find_track_program(const fs::path& exe_dir, const std::string& path_env) {
  const fs::path venv = (exe_dir / ".." / ".venv" / "bin" / "dflash-data").lexically_normal();
  if (executable_file(venv)) return venv;
  std::stringstream dirs(path_env);
  for (std::string dir; std::getline(dirs, dir, ':');)
    if (!dir.empty() && executable_file(fs::path(dir) / "dflash-data")) return fs::path(dir) / "dflash-data";
  return {};
}

nlohmann::ordered_json config_json(const Config& cfg) {
  Config c = cfg;
  nlohmann::ordered_json out = nlohmann::ordered_json::object();
  for (const config_detail::Field& f : config_detail::fields()) {
    nlohmann::ordered_json* at = &out;
    std::stringstream parts(f.key);
    std::vector<std::string> path;
    for (std::string part; std::getline(parts, part, '.');) path.push_back(part);
    for (size_t i = 0; i + 1 < path.size(); ++i) at = &(*at)[path[i]];
    (*at)[path.back()] = field_json(c, f);
  }
  nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
  for (const Bucket& b : cfg.buckets) buckets.push_back({{"seq", b.seq}, {"anchors", b.anchors}, {"batch", b.batch}});
  out["buckets"] = buckets;
  out["source"] = cfg.source.string();
  return out;
}

TrackerFollower::TrackerFollower(const Config& cfg, const TrackerOptions& options, const LogFn& warn)
    : warn_(warn), drain_s_(options.drain_s) {
  const MetricsConfig& m = cfg.metrics;
  if (m.trackers.empty()) return;
  std::string names;
  for (const std::string& t : m.trackers) names += (names.empty() ? "" : ", ") + ("\"" + t + "\"");
  const std::string what = "metrics.trackers = [" + names + "]";
  std::error_code ec;
  const fs::path dump = fs::absolute(cfg.job.dump_folder, ec).lexically_normal();
  const std::string by_hand = "; metrics.jsonl has every record, and `dflash-data track --dump-folder " +
                              dump.string() + "` feeds the trackers from it later";

  fs::path program = options.program;
  if (program.empty()) {
    const fs::path exe_dir = fs::read_symlink("/proc/self/exe", ec).parent_path();
    const char* path_env = std::getenv("PATH");
    program = find_track_program(exe_dir, path_env ? path_env : "");
    if (program.empty()) {
      warn_(what + ": the follower program dflash-data is neither at " +
            (exe_dir / ".." / ".venv" / "bin" / "dflash-data").lexically_normal().string() +
            " nor on PATH; install it with `bash scripts/setup-python.sh` (from the repository). Training goes on "
            "without trackers" + by_hand);
      return;
    }
  } else if (!executable_file(program)) {
    warn_(what + ": the follower program " + program.string() +
          " is not an executable file; install dflash-data with `bash scripts/setup-python.sh`. Training goes on "
          "without trackers" + by_hand);
    return;
  }

  // The resolved config, for the trackers' hyperparameters and the follower's settings.
  const fs::path dir = dump / "trackers";
  try {
    fs::create_directories(dir);
    write_file_atomic(dir / "config.json", config_json(cfg).dump(2) + "\n");
  } catch (const std::exception& e) {
    warn_(what + ": cannot write " + (dir / "config.json").string() + " (" + e.what() +
          "); training goes on without trackers" + by_hand);
    return;
  }

  std::vector<std::string> args = {program.string(), "track", "--dump-folder", dump.string(), "--parent-pid",
                                   std::to_string(::getpid())};
  if (options.restart) {
    const uintmax_t size = fs::exists(dump / "metrics.jsonl", ec) ? fs::file_size(dump / "metrics.jsonl", ec) : 0;
    args.push_back("--restart-at");
    args.push_back(std::to_string(ec ? 0 : size));
  }
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);

  int fds[2];
  if (::pipe2(fds, O_CLOEXEC) != 0) {
    warn_(what + ": cannot make a pipe for the follower (" + std::strerror(errno) +
          "); training goes on without trackers" + by_hand);
    return;
  }
  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[0], STDIN_FILENO);  // dup2 clears close-on-exec
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
  posix_spawn_file_actions_addclosefrom_np(&actions, STDERR_FILENO + 1);  // e.g. metrics.jsonl's descriptor
#endif
  posix_spawnattr_init(&attr);
  sigset_t none, defaults;
  sigemptyset(&none);
  sigemptyset(&defaults);
  for (int s : {SIGINT, SIGTERM, SIGPIPE, SIGHUP}) sigaddset(&defaults, s);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &defaults);
  posix_spawnattr_setpgroup(&attr, 0);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP | POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, program.c_str(), &actions, &attr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  ::close(fds[0]);
  if (rc != 0) {
    ::close(fds[1]);
    warn_(what + ": cannot start " + program.string() + " (" + std::strerror(rc) +
          "); reinstall it with `bash scripts/setup-python.sh`. Training goes on without trackers" + by_hand);
    return;
  }
  pid_ = pid;
  pipe_ = fds[1];
}

TrackerFollower::~TrackerFollower() { stop(); }

void TrackerFollower::stop() {
  if (pipe_ >= 0) ::close(pipe_);
  pipe_ = -1;
  if (pid_ <= 0) return;
  const pid_t pid = pid_;
  pid_ = 0;
  const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(drain_s_);
  int status = 0;
  for (;;) {
    const pid_t r = ::waitpid(pid, &status, WNOHANG);
    if (r == pid) break;
    if (r < 0) return;  // not our child any more (reaped elsewhere)
    if (std::chrono::steady_clock::now() >= end) {
      char waited[32];
      std::snprintf(waited, sizeof waited, "%g", drain_s_);
      warn_("dflash-data track (pid " + std::to_string(pid) + ") is still writing to its trackers after " + waited +
            " s; it goes on by itself and exits when done");
      return;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  // Status 1: the follower said why on stderr itself.
  if (WIFEXITED(status) && (WEXITSTATUS(status) == 0 || WEXITSTATUS(status) == 1)) return;
  warn_("dflash-data track (pid " + std::to_string(pid) + ") ended with " +
        (WIFEXITED(status) ? "status " + std::to_string(WEXITSTATUS(status))
                           : "signal " + std::to_string(WTERMSIG(status))) +
        " (its messages are above); metrics.jsonl has every record, and `dflash-data track --dump-folder DIR` "
        "feeds the trackers from it");
}

std::unique_ptr<TrackerFollower> start_trackers(const Config& cfg, const TrackerOptions& options, const LogFn& warn) {
  if (cfg.metrics.trackers.empty()) return nullptr;
  return std::make_unique<TrackerFollower>(cfg, options, warn);
}

}  // namespace dflash

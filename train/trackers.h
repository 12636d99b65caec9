// Experiment trackers ([metrics] trackers: TensorBoard, Weights & Biases): rank 0 starts
// `dflash-data track` (python/dflash_data/track.py), which follows metrics.jsonl and feeds every
// record to each tracker. metrics.jsonl stays the source of truth; the trainer never waits on the
// follower while it trains, and a follower that cannot start is one warning, never an error.
#pragma once
#include <sys/types.h>

#include <filesystem>
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config.h"
#include "train/job.h"

namespace dflash {

// The follower program: <exe_dir>/../.venv/bin/dflash-data (the repository's .venv beside the build
// folder), else dflash-data in one of `path_env`'s directories (PATH's syntax); empty when neither
// exists as an executable file.
std::filesystem::path find_track_program(const std::filesystem::path& exe_dir, const std::string& path_env);

// The resolved config as the follower reads it (<dump_folder>/trackers/config.json): one object per
// section, nested as the dotted keys are ("target": {"synthetic": {...}}), typed as TOML would
// type them, with "buckets" as an array of {seq, anchors, batch}.
nlohmann::ordered_json config_json(const Config& cfg);

struct TrackerOptions {
  // The run starts over (checkpoint.resume = false): new tracker runs, fed from metrics.jsonl's
  // current end. Otherwise the follower continues the dump folder's tracker runs and drops the
  // records at or before the steps it already forwarded (a resume re-logs the steps after its
  // checkpoint).
  bool restart = false;
  std::filesystem::path program;  // empty: find_track_program(this executable's folder, $PATH)
  double drain_s = 10;            // how long stop() waits for the follower to finish
};

// One follower process, started by the constructor when cfg.metrics.trackers is not empty. It
// reads nothing from the trainer but a pipe on its stdin, whose end (stop(), or this process
// dying in any way) tells it to forward the rest of metrics.jsonl and exit; it also exits when its
// parent changes. It runs in its own process group, so a terminal's Ctrl-C reaches the trainer
// alone (which then stops cleanly and ends the follower). Problems go to `warn`, one line each.
class TrackerFollower {
 public:
  TrackerFollower(const Config& cfg, const TrackerOptions& options, const LogFn& warn);
  ~TrackerFollower();  // stop()
  TrackerFollower(const TrackerFollower&) = delete;
  TrackerFollower& operator=(const TrackerFollower&) = delete;

  // Closes the pipe and waits up to drain_s for the follower to exit; one still busy after that
  // (a slow upload) is left to finish by itself. Idempotent.
  void stop();
  pid_t pid() const { return pid_; }  // 0 when no follower was started

 private:
  LogFn warn_;
  double drain_s_ = 10;
  pid_t pid_ = 0;
  int pipe_ = -1;  // the write end; the follower's stdin is the read end
};

// The trainer's follower: null when cfg.metrics.trackers is empty.
std::unique_ptr<TrackerFollower> start_trackers(const Config& cfg, const TrackerOptions& options, const LogFn& warn);

}  // namespace dflash

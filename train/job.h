// What every dflash-train subcommand derives from a config: the dump folder (checked writable),
// the target (written first when synthetic), the drafter's spec, the worker devices, and the
// training and eval data (generated from the target when synthetic).
#pragma once
#include <filesystem>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "data/data.h"
#include "data/screen.h"
#include "model/drafter_spec.h"
#include "model/hf_config.h"
#include "runtime/device.h"
#include "train/config.h"

namespace dflash {

using LogFn = std::function<void(const std::string&)>;

struct Job {
  Config cfg;
  TargetSpec target;
  DrafterSpec drafter;
  std::vector<Device> devices;  // one worker each
  std::string device_note;      // why these devices (for the startup log)
};

// Validates and prepares; creates the dump folder. `log` receives one line per action taken.
Job setup_job(const Config& cfg, const LogFn& log);

// The drafter's dims: the config's, or the target's where the config leaves 0.
DrafterSpec drafter_spec_for(const Config& cfg, const TargetSpec& target);

// runtime.devices -> one device per worker ("cpu" gives runtime.cpu_workers CPU workers).
std::vector<Device> resolve_devices(const RuntimeConfig& rt, std::string* note);

// Creates `dir` and proves it writable; the error names the key, the path and the fix.
void ensure_writable_dir(const std::filesystem::path& dir, const std::string& key);

// The training data (data.train), generating it from the target first when data.synthetic is on
// and the file does not exist yet. Likewise the eval data (data.eval; null when not configured).
std::unique_ptr<Dataset> open_train_data(const Job& job, const LogFn& log);
std::unique_ptr<Dataset> open_eval_data(const Job& job, const LogFn& log);

// The memory each worker may use: runtime.memory_limit_gb, else what the device has free; on the
// CPU, split among its workers. `source` (optional) says where the figure comes from.
uint64_t worker_memory_bytes(const Job& job, std::string* source = nullptr);

// The memory check before startup (train/memory_fit.h) for this job's workers: refuses with the
// numbers, before anything is allocated, buckets whose persistent tensors alone cannot fit.
void check_memory_before_startup(const Job& job, bool train, bool online);

// Refuses a drafter.init (warm start) that is neither an export nor a checkpoints/step-N folder,
// naming the key and what it expects; nothing to do when the key is empty.
void check_drafter_init(const Config& cfg);

// Screens data for the job (data/screen.h: its buckets, overflow policy, block size and mask
// token), passes the mask-token warning to `warn`, and refuses data of which no sequence has a
// valid anchor, with the counts. `what` names the data in messages ("training data").
DataScreen screen_job_data(const Job& job, const Dataset& data, const std::string& what, const LogFn& warn);

}  // namespace dflash

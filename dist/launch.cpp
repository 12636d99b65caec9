// Launcher variables: torchrun first, then Slurm; every refusal names the variable and the fix.
#include "dist/launch.h"

#include <cstdlib>
#include <vector>

#include "runtime/error.h"

namespace dflash {

namespace {

struct Vars {
  const char *rank, *world, *local_rank, *local_world;
  const char* who;
};
constexpr Vars kTorchrun = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "torchrun"};
constexpr Vars kSlurm = {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", nullptr, "slurm"};

// A decimal integer in [lo, hi]; the error names the variable, its value and who sets it.
int parse_int(const EnvLookup& env, const char* name, const char* who, int lo, int hi) {
  std::optional<std::string> v = env(name);
  const std::string text = v ? *v : "";
  bool digits = !text.empty() && text.size() <= 9;
  for (char c : text) digits = digits && c >= '0' && c <= '9';
  DF_CHECK(digits, name << "=\"" << text << "\" is not a whole number (" << who
                        << " sets it); fix: unset it, or launch with torchrun or srun, which set it correctly");
  const long value = std::strtol(text.c_str(), nullptr, 10);
  DF_CHECK(value >= lo && value <= hi, name << "=" << value << " must lie in [" << lo << ", " << hi << "] (" << who
                                            << " sets it); fix: check the launch command");
  return int(value);
}

void require_set(const EnvLookup& env, const Vars& v, const char* name) {
  DF_CHECK(env(name).has_value(),
           name << " is not set, but " << (env(v.rank) ? v.rank : env(v.world) ? v.world : v.local_rank)
                << " is: " << v.who << " sets " << v.rank << ", " << v.world << " and " << v.local_rank
                << " together; fix: launch with " << (std::string(v.who) == "torchrun" ? "torchrun" : "srun")
                << " or unset them all for a one-process run");
}

LaunchInfo parse_vars(const EnvLookup& env, const Vars& v) {
  for (const char* name : {v.rank, v.world, v.local_rank}) require_set(env, v, name);
  LaunchInfo l;
  l.launcher = v.who;
  l.world = parse_int(env, v.world, v.who, 1, 1 << 20);
  l.rank = parse_int(env, v.rank, v.who, 0, 1 << 20);
  DF_CHECK(l.rank < l.world, v.rank << "=" << l.rank << " lies outside " << v.world << "=" << l.world << " (ranks are 0.."
                                    << l.world - 1 << "); fix: check the launch command");
  l.local_rank = parse_int(env, v.local_rank, v.who, 0, 1 << 20);
  if (v.local_world && env(v.local_world)) {
    l.local_world = parse_int(env, v.local_world, v.who, 1, 1 << 20);
    DF_CHECK(l.local_world <= l.world, v.local_world << "=" << l.local_world << " exceeds " << v.world << "="
                                                     << l.world << "; fix: check the launch command");
    DF_CHECK(l.local_rank < l.local_world, v.local_rank << "=" << l.local_rank << " lies outside " << v.local_world
                                                        << "=" << l.local_world << "; fix: check the launch command");
  }
  if (!l.distributed()) return l;
  const bool slurm = l.launcher == "slurm";
  const char* export_fix = slurm ? "; fix: the batch script must export it before srun, e.g. export MASTER_ADDR=$(scontrol "
                                   "show hostnames \"$SLURM_JOB_NODELIST\" | head -n 1) and export MASTER_PORT=29500"
                                 : "; fix: torchrun sets it (--master-addr, --master-port or --rdzv-endpoint)";
  std::optional<std::string> addr = env("MASTER_ADDR");
  DF_CHECK(addr && !addr->empty(), "MASTER_ADDR is not set, but " << v.world << "=" << l.world
                                                                 << " processes must find rank 0 through it" << export_fix);
  DF_CHECK(env("MASTER_PORT").has_value(), "MASTER_PORT is not set, but " << v.world << "=" << l.world
                                                                         << " processes must find rank 0 through it"
                                                                         << export_fix);
  l.master_addr = *addr;
  l.master_port = parse_int(env, "MASTER_PORT", slurm ? "the batch script" : "torchrun", 1, 65535);
  return l;
}

}  // namespace

std::vector<int> cuda_device_ids(const std::string& setting) {
  std::vector<int> ids;
  const std::string list = setting.substr(5);
  size_t pos = 0;
  while (pos <= list.size()) {
    size_t comma = list.find(',', pos);
    ids.push_back(std::stoi(list.substr(pos, comma - pos)));
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  return ids;
}

std::string LaunchInfo::describe() const {
  if (launcher == "slurm")
    return "SLURM_PROCID=" + std::to_string(rank) + " of SLURM_NTASKS=" + std::to_string(world) + " (srun)";
  return "RANK=" + std::to_string(rank) + " of WORLD_SIZE=" + std::to_string(world) + " (torchrun)";
}

LaunchInfo launch_from_environment(const EnvLookup& env) {
  for (const char* name : {"RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"})
    if (env(name)) return parse_vars(env, kTorchrun);
  for (const char* name : {"SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID"})
    if (env(name)) return parse_vars(env, kSlurm);
  return LaunchInfo{};
}

LaunchInfo launch_from_environment() {
  return launch_from_environment([](const std::string& name) -> std::optional<std::string> {
    const char* v = std::getenv(name.c_str());
    return v ? std::optional<std::string>(v) : std::nullopt;
  });
}

int rendezvous_port_for(const LaunchInfo& launch, int64_t configured_port) {
  if (configured_port > 0) return int(configured_port);
  DF_CHECK(launch.master_port < 65535, "MASTER_PORT=" << launch.master_port << " leaves no port for the rendezvous "
                                                      << "(MASTER_PORT + 1); fix: set runtime.rendezvous_port or a lower "
                                                      << "MASTER_PORT");
  return launch.master_port + 1;
}

int local_gpu_for(const LaunchInfo& l, int visible, const std::string& setting,
                  const std::optional<std::string>& cvd) {
  const std::string seen = "CUDA_VISIBLE_DEVICES=" + (cvd ? "\"" + *cvd + "\"" : std::string("(unset)"));
  const std::string who = l.launcher == "slurm" ? "SLURM_LOCALID" : "LOCAL_RANK";
  DF_CHECK(setting != "cpu", "runtime.devices = \"cpu\", but this process is " << l.describe()
                                                                                << ": the processes of a run meet through "
                                                                                << "NCCL, which needs one GPU each; fix: use "
                                                                                << "runtime.devices = \"auto\", or start one "
                                                                                << "process without a launcher");
  DF_CHECK(visible > 0, "no GPU is visible to " << l.describe() << " (" << who << "=" << l.local_rank << ", " << seen
                                                << "); every process of a multi-process run needs one GPU; fix: run on "
                                                << "GPU nodes (srun --gpus-per-task=1) or check CUDA_VISIBLE_DEVICES");
  if (setting.rfind("cuda:", 0) == 0) {
    const std::vector<int> ids = cuda_device_ids(setting);
    DF_CHECK(l.local_rank < int(ids.size()), who << "=" << l.local_rank << " but runtime.devices = \"" << setting
                                                 << "\" names " << ids.size() << " GPU(s), one per process of this node; "
                                                 << "fix: list one GPU per local process, or use \"auto\"");
    const int id = ids[size_t(l.local_rank)];
    DF_CHECK(id < visible, "runtime.devices = \"" << setting << "\" gives " << who << "=" << l.local_rank << " cuda:" << id
                                                  << ", but only " << visible << " GPU(s) are visible (" << seen << ")");
    return id;
  }
  if (visible == 1) return 0;
  DF_CHECK(l.local_rank < visible, who << "=" << l.local_rank << " but only " << visible << " GPU(s) are visible ("
                                       << seen << "); fix: start at most " << visible
                                       << " processes per node (torchrun --nproc-per-node=" << visible
                                       << "), or give each process its own GPU (srun --gpus-per-task=1)");
  return l.local_rank;
}

}  // namespace dflash

// CUPTI-based kernel timing for the profiler: graph nodes captured while a ProfileLog is attached
// are mapped to the recorded calls; activity records of real graph replays give each kernel's
// own device time, summed per call.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/profile.h"

namespace dflash {

struct CuptiReplayTimes {
  std::vector<double> call_ms;  // per call of the log, summed over the collected replays
  double busy_ms = 0;           // all kernels and memsets, summed
  // First start to last end over every record collected: a replay of several programs (a decode
  // round) leaves gaps between its graph launches, which the time it is held to includes.
  double span_ms = 0;
  int64_t records = 0;          // kernels + memsets + memcpys seen
  int64_t unattributed = 0;     // records whose graph node maps to no call
  int64_t by_order = 0;         // records attributed by their position in the launch
  std::string unattributed_example;
};

// True when this build has CUPTI (the profiler's GPU path needs it).
bool cupti_available();

// Subscribes (once per process) to graph-node creation; nodes captured while `log` is the
// thread's capturing log map to its current call. Call before recording.
void cupti_track_graph_nodes();

// Starts collecting activity records; stop() flushes and attributes them through log's node map.
void cupti_start();
CuptiReplayTimes cupti_stop(const ProfileLog& log, int64_t replays);

// The kernel inventory (DFLASH_KERNEL_INVENTORY in the test binary, for the sanitizer
// coverage of scripts/gpu-test.sh): from start to stop, the names of every kernel that runs, eager or in a graph, are
// kept (demangled, each once) and nothing else. Not to be used while the profiler collects.
void cupti_inventory_start();
std::vector<std::string> cupti_inventory_stop();  // sorted

}  // namespace dflash

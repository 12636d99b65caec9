// The startup report: what was recorded per bucket (kernels, arena with and without
// checkpointing, record time) plus persistent bytes and the kernels chosen for the device and the
// shapes (kernels/heuristics.h), as a printed table and as startup.json.
#pragma once
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "graphs/engine.h"

namespace dflash {

struct StartupReport {
  std::string device;
  int workers = 1;               // ranks of the run (threads or processes)
  bool shard_optimizer = false;  // ZeRO-1: persistent bytes hold 1/workers of masters and moments
  size_t persistent_bytes = 0;  // per worker (per GPU)
  size_t arena_bytes = 0;       // per worker (the largest program)
  double startup_ms = 0;
  std::vector<ProgramReport> programs;
  std::vector<std::string> kernel_choices;  // a line per op family (train/kernel_choices.h); none on the CPU
};

StartupReport make_startup_report(const Engine& engine, int workers, double startup_ms);
std::string format_startup_table(const StartupReport& r);
// The program's recomputation: "-" (no choice), "4/5" (four layers recomputed), "3+1p/5" (three
// entirely and one in part).
std::string recompute_label(const ProgramReport& p);
// One line for the log when memory could buy back the recomputation: some program recomputes,
// runtime.arena_gb was left at 0 (the smallest arena), and `available_bytes` (free after startup,
// shared by `workers` arenas) holds every arena's growth to the largest program's arena without
// checkpointing, plus 1 GiB, within `arena_limit_bytes` (runtime.memory_limit_gb; 0: none).
// Empty otherwise. It names the runtime.arena_gb value that makes nothing recompute.
std::string recompute_hint(const StartupReport& r, bool arena_budget_set, size_t available_bytes, int workers,
                           size_t arena_limit_bytes);
nlohmann::json startup_json(const StartupReport& r);
// Writes <dump_folder>/startup.json atomically.
void write_startup_json(const std::filesystem::path& dump_folder, const StartupReport& r);

std::string human_bytes(size_t bytes);

}  // namespace dflash

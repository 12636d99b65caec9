// Formatting of the startup report.
#include "graphs/startup_report.h"

#include <algorithm>
#include <cmath>
#include <cstdio>

#include "runtime/fileio.h"

namespace dflash {

std::string human_bytes(size_t bytes) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = double(bytes);
  int u = 0;
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  char buf[32];
  std::snprintf(buf, sizeof buf, u ? "%.2f %s" : "%.0f %s", v, units[u]);
  return buf;
}

StartupReport make_startup_report(const Engine& engine, int workers, double startup_ms) {
  StartupReport r;
  r.device = engine.context().device().str();
  r.workers = workers;
  r.persistent_bytes = engine.context().persistent_bytes();
  r.arena_bytes = engine.arena_bytes();
  r.startup_ms = startup_ms;
  r.programs = engine.report();
  return r;
}

std::string recompute_label(const ProgramReport& p) {
  if (p.segments == 0) return "-";
  const std::string whole = std::to_string(p.recomputed - p.partially_recomputed), of = "/" + std::to_string(p.segments);
  return p.partially_recomputed == 0 ? whole + of : whole + "+" + std::to_string(p.partially_recomputed) + "p" + of;
}

std::string format_startup_table(const StartupReport& r) {
  std::string out;
  char line[256];
  std::snprintf(line, sizeof line, "%-14s %6s %7s %5s %8s %12s %14s %9s %9s\n", "program", "seq", "anchors", "batch",
                "kernels", "arena", "arena no-ckpt", "recompute", "record ms");
  out += line;
  for (const ProgramReport& p : r.programs) {
    const std::string recompute = recompute_label(p);
    std::snprintf(line, sizeof line, "%-14s %6lld %7lld %5lld %8zu %12s %14s %9s %9.2f\n", p.name.c_str(),
                  (long long)p.bucket.seq, (long long)p.bucket.anchors, (long long)p.bucket.batch, p.kernels,
                  human_bytes(p.arena_bytes).c_str(), human_bytes(p.arena_bytes_without_checkpointing).c_str(),
                  recompute.c_str(), p.record_ms);
    out += line;
  }
  std::snprintf(line, sizeof line, "device %s, %d worker(s); per worker: arena %s (shared by all programs), "
                "persistent %s%s; startup (load, plan, record) %.0f ms\n",
                r.device.c_str(), r.workers, human_bytes(r.arena_bytes).c_str(), human_bytes(r.persistent_bytes).c_str(),
                r.shard_optimizer ? " (optimizer state sharded)" : "", r.startup_ms);
  out += line;
  if (!r.kernel_choices.empty()) out += "kernels (kernels/heuristics.h):\n";
  for (const std::string& k : r.kernel_choices) out += "  " + k + "\n";
  return out;
}

std::string recompute_hint(const StartupReport& r, bool arena_budget_set, size_t available_bytes, int workers,
                           size_t arena_limit_bytes) {
  size_t recomputing = 0, without = 0;
  for (const ProgramReport& p : r.programs) {
    if (p.recomputed > 0) ++recomputing;
    without = std::max(without, p.arena_bytes_without_checkpointing);
  }
  if (arena_budget_set || recomputing == 0 || without <= r.arena_bytes) return "";
  if (arena_limit_bytes > 0 && without > arena_limit_bytes) return "";
  const size_t margin = size_t(1) << 30, growth = (without - r.arena_bytes) * size_t(std::max(1, workers));
  if (available_bytes < growth + margin) return "";
  // The budget rounded up to 0.01 GiB, so that the value as printed still holds the arena.
  const double gib = std::ceil(double(without) / double(1ull << 30) * 100.0) / 100.0;
  char line[400];
  std::snprintf(line, sizeof line,
                "hint: %zu program(s) recompute layers to fit the smallest arena, but %s is free after startup: "
                "runtime.arena_gb = %.2f (%s more per worker) lets nothing recompute, for faster steps with the "
                "same results bit for bit",
                recomputing, human_bytes(available_bytes).c_str(), gib, human_bytes(without - r.arena_bytes).c_str());
  return line;
}

nlohmann::json startup_json(const StartupReport& r) {
  nlohmann::json j;
  j["device"] = r.device;
  j["workers"] = r.workers;
  j["shard_optimizer"] = r.shard_optimizer;
  j["persistent_bytes"] = r.persistent_bytes;
  j["arena_bytes"] = r.arena_bytes;
  j["startup_ms"] = r.startup_ms;
  j["kernel_choices"] = r.kernel_choices;
  j["buckets"] = nlohmann::json::array();
  j["programs"] = nlohmann::json::array();
  for (const ProgramReport& p : r.programs) {
    nlohmann::json e = {{"name", p.name},
                        {"seq", p.bucket.seq},
                        {"anchors", p.bucket.anchors},
                        {"batch", p.bucket.batch},
                        {"kernels", p.kernels},
                        {"arena_bytes", p.arena_bytes},
                        {"arena_bytes_without_checkpointing", p.arena_bytes_without_checkpointing},
                        {"arena_bytes_full_checkpointing", p.arena_bytes_full_checkpointing},
                        {"segments", p.segments},
                        {"recomputed_segments", p.recomputed},
                        {"partially_recomputed_segments", p.partially_recomputed},
                        {"arena_peak_at", p.peak_at},
                        {"arena_live_bytes", p.live_bytes},
                        {"record_ms", p.record_ms}};
    j["programs"].push_back(e);
    if (p.name.rfind("train/", 0) == 0) j["buckets"].push_back(e);
  }
  return j;
}

void write_startup_json(const std::filesystem::path& dump_folder, const StartupReport& r) {
  write_file_atomic(dump_folder / "startup.json", startup_json(r).dump(2) + "\n");
}

}  // namespace dflash

// A worker's programs, decided at startup: every registered program is planned (with and without
// recompute checkpointing, for the report), the set is checked against the memory available,
// one arena sized to the largest program is reserved, every program is recorded over it, and the
// context is sealed. After build() the worker only replays.
#pragma once
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "graphs/buckets.h"
#include "graphs/checkpoint.h"
#include "graphs/program.h"

namespace dflash {

struct ProgramReport {
  std::string name;
  Bucket bucket;  // seq 0 for programs that belong to no bucket (the update)
  size_t kernels = 0;
  size_t arena_bytes = 0;
  size_t arena_bytes_without_checkpointing = 0;
  size_t arena_bytes_full_checkpointing = 0;
  int64_t segments = 0;    // checkpointable segments (layers); 0 when the body has no choice
  int64_t recomputed = 0;  // of which the recording recomputes this many (entirely or in part)
  int64_t partially_recomputed = 0;  // of those, recomputed only in part
  std::string peak_at;     // the op (phase) at the arena peak
  size_t live_bytes = 0;   // the most bytes live at once in the chosen plan (<= arena_bytes)
  double record_ms = 0;
};

// A body that builds the program's op sequence; `checkpointing` says whether to use
// recompute checkpointing (the engine also plans it without, for the report).
using ProgramBody = std::function<void(bool checkpointing)>;
// A body with checkpointable segments, run as `Recompute` says.
using FittedBody = std::function<void(Recompute)>;

// The choices a fitted body over `segments` offers, fastest first by the cost model (a segment
// recomputed in part costs `partial_cost` of one recomputed entirely; the body knows its shapes,
// e.g. the drafter's share of GEMM work its partial recomputation keeps); the last one recomputes
// every segment entirely. Without partial recomputation: full = 0, 1, ..., segments.
constexpr double kPartialRecomputeCost = 0.25;
constexpr int64_t kMaxPartialSegments = 12;  // deeper bodies: no partial recomputation
std::vector<Recompute> recompute_ladder(int64_t segments, bool partial,
                                        double partial_cost = kPartialRecomputeCost);

class Engine {
 public:
  explicit Engine(Context& ctx) : ctx_(ctx) {}

  void add(const std::string& name, const Bucket& bucket, ProgramBody body, bool checkpointing);
  // Checkpointing fitted to the arena: the arena is sized by the worker's most demanding program
  // with every segment recomputed, and is reserved anyway; this program then takes the first
  // choice of recompute_ladder (the fastest) that stays within that arena (often no
  // recomputation for small buckets). `partial`: the body can recompute segments in part, at
  // `partial_cost` of an entire recomputation. Every segment recomputed entirely always fits
  // (though another choice may keep less). The choice depends only on the plans, so it is the
  // same on every rank and every run.
  void add_fitted(const std::string& name, const Bucket& bucket, FittedBody body, int64_t segments,
                  bool partial = false, double partial_cost = kPartialRecomputeCost);
  // Trades memory for speed: with a budget (bytes, > 0) the arena may grow up to it (never below
  // what the most demanding program needs with every segment recomputed), and every fitted
  // program, the most demanding one included, takes the fastest choice that keeps it within the
  // budget. 0 (the default): the smallest arena, as add_fitted says.
  void set_arena_budget(size_t bytes) { arena_budget_ = bytes; }
  // For measurements (dflash-bench --recompute): every fitted program runs this choice, whatever
  // the memory; the arena is sized to what the choices need. Refused where a program has fewer
  // segments than the choice names.
  void force_recompute(std::optional<Recompute> r) { forced_ = r; }

  // Plans, checks the fit, reserves the arena, records and seals. available_bytes is the memory
  // the arena may take on this device (for all of this worker's programs: they share it).
  // progress(line) is called before each program is planned and recorded.
  void build(size_t available_bytes, const std::function<void(const std::string&)>& progress = {});

  const Program& program(const std::string& name) const;
  bool has(const std::string& name) const { return programs_.count(name) != 0; }
  const std::vector<ProgramReport>& report() const { return reports_; }
  size_t arena_bytes() const { return arena_bytes_; }
  // What startup GEMM tuning did (Context::set_gemm_tuning; empty when off or on the CPU).
  const std::string& gemm_tuning_summary() const { return gemm_tuning_summary_; }
  Context& context() const { return ctx_; }

 private:
  struct Entry {
    std::string name;
    Bucket bucket;
    FittedBody body;
    int64_t segments = 0;  // the most the body can recompute
    bool fitted = false;   // else it always recomputes all of them
    bool partial = false;  // it can recompute segments in part
    double partial_cost = kPartialRecomputeCost;
    Recompute chosen;
  };
  void add_entry(Entry e);

  Context& ctx_;
  std::vector<Entry> entries_;
  std::map<std::string, Program> programs_;
  std::vector<ProgramReport> reports_;
  size_t arena_bytes_ = 0;
  std::string gemm_tuning_summary_;
  size_t arena_budget_ = 0;
  std::optional<Recompute> forced_;
};

// Memory an arena may take on a device now: free GPU memory, or the host's available memory.
size_t available_memory_bytes(Device device);

}  // namespace dflash

// Engine::build: plan every program, check the fit, reserve one arena, record, seal.
#include "graphs/engine.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/gemm_tuner.h"
#endif

namespace dflash {

namespace {
// Launches timed per GEMM candidate at startup: few enough that tuning takes seconds. 200, timing
// the candidates at the clock the power cap holds, gained nothing in the step either (docs/BENCH.md).
constexpr int kGemmTuningReps = 5;

std::string gib(size_t bytes) {
  std::ostringstream os;
  os.precision(3);
  os << double(bytes) / double(1ull << 30) << " GiB";
  return os.str();
}
}  // namespace

std::vector<Recompute> recompute_ladder(int64_t segments, bool partial, double partial_cost) {
  // (L+1)(L+2)/2 choices, each planned until one fits: beyond kMaxPartialSegments the startup
  // would plan hundreds, so deep bodies recompute entirely or not at all.
  if (segments > kMaxPartialSegments) partial = false;
  std::vector<Recompute> ladder;
  for (int64_t full = 0; full <= segments; ++full)
    for (int64_t part = 0; part <= (partial ? segments - full : 0); ++part) ladder.push_back({full, part});
  auto cost = [&](const Recompute& r) { return double(r.full) + partial_cost * double(r.partial); };
  // Equal costs: more layers recomputed entirely first (an arbitrary but fixed order; which of the
  // two keeps less depends on the shapes).
  std::stable_sort(ladder.begin(), ladder.end(), [&](const Recompute& a, const Recompute& b) {
    return cost(a) != cost(b) ? cost(a) < cost(b) : a.full > b.full;
  });
  return ladder;
}

void Engine::add(const std::string& name, const Bucket& bucket, ProgramBody body, bool checkpointing) {
  add_entry({name, bucket, [body](Recompute r) { body(r.full > 0); }, checkpointing ? 1 : 0, false, false,
             kPartialRecomputeCost, {}});
}

void Engine::add_fitted(const std::string& name, const Bucket& bucket, FittedBody body, int64_t segments,
                        bool partial, double partial_cost) {
  DF_CHECK(segments >= 0, "program '" << name << "': " << segments << " checkpointable segments");
  DF_CHECK(partial_cost >= 0 && partial_cost <= 1,
           "program '" << name << "': a partial recomputation costs " << partial_cost
                       << " of an entire one; it must lie in [0, 1]");
  add_entry({name, bucket, std::move(body), segments, true, partial, partial_cost, {}});
}

void Engine::add_entry(Entry e) {
  DF_CHECK(!ctx_.sealed(), "program '" << e.name << "' added after the runtime was sealed: buckets are fixed "
                                       << "at startup; add a [[buckets]] entry to the config and restart");
  for (const Entry& x : entries_) DF_CHECK(x.name != e.name, "program '" << e.name << "' added twice");
  entries_.push_back(std::move(e));
}

void Engine::build(size_t available_bytes, const std::function<void(const std::string&)>& progress) {
  DF_CHECK(!ctx_.sealed(), "Engine::build on a sealed runtime: buckets are fixed at startup");
  reports_.clear();
  auto plan = [&](const Entry& e, Recompute r) { return plan_program(ctx_, e.name, [&] { e.body(r); }); };
  auto all = [](const Entry& e) { return Recompute{e.segments, 0}; };
  // Every program with all its segments recomputed: the largest of these sizes the arena.
  std::vector<PlanResult> plans;
  size_t largest = 0;
  const Entry* largest_entry = nullptr;
  for (const Entry& e : entries_) {
    if (progress) progress("planning " + e.name);
    ProgramReport r;
    r.name = e.name;
    r.bucket = e.bucket;
    r.segments = e.segments;
    PlanResult full = plan(e, all(e));
    r.arena_bytes_full_checkpointing = full.needed_bytes();
    r.arena_bytes_without_checkpointing = e.segments > 0 ? plan(e, Recompute{}).needed_bytes() : full.needed_bytes();
    if (full.needed_bytes() >= largest) {
      largest = full.needed_bytes();
      largest_entry = &e;
    }
    plans.push_back(full);
    reports_.push_back(r);
  }
  if (largest > available_bytes) {
    std::ostringstream os;
    os << "the bucket set does not fit on " << ctx_.device().str() << ": its largest program '"
       << largest_entry->name << "' " << largest_entry->bucket.str() << " needs an activation arena of "
       << gib(largest) << " (" << largest << " bytes) on top of " << gib(ctx_.persistent_bytes())
       << " of persistent tensors, but only " << gib(available_bytes) << " (" << available_bytes
       << " bytes) are available. Per program:";
    for (const ProgramReport& r : reports_) os << "\n  " << r.name << ": " << r.arena_bytes_full_checkpointing << " bytes";
    os << "\nRemove or shrink the largest bucket (seq, anchors or batch), or turn checkpointing on.";
    DF_FAIL(os.str());
  }
  if (arena_budget_ > available_bytes) {
    DF_FAIL("the arena budget of " << gib(arena_budget_) << " (" << arena_budget_ << " bytes) exceeds the "
                                   << gib(available_bytes) << " (" << available_bytes
                                   << " bytes) available for the arena on " << ctx_.device().str()
                                   << "; lower runtime.arena_gb or raise runtime.memory_limit_gb");
  }
  // Fitted programs take the fastest choice that keeps them within that arena (or within the
  // budget, when one is set and larger); the last choice, everything recomputed, always fits.
  const size_t target = std::max(largest, arena_budget_);
  for (size_t i = 0; i < entries_.size(); ++i) {
    Entry& e = entries_[i];
    e.chosen = all(e);
    if (!e.fitted) continue;
    if (forced_) {
      DF_CHECK(forced_->full >= 0 && forced_->partial >= 0 && forced_->full + forced_->partial <= e.segments &&
                   (forced_->partial == 0 || e.partial),
               "program '" << e.name << "' has " << e.segments << " checkpointable segments"
                           << (e.partial ? "" : ", none recomputable in part") << "; it cannot recompute "
                           << forced_->full << " entirely and " << forced_->partial << " in part");
      e.chosen = *forced_;
      plans[i] = plan(e, e.chosen);
      continue;
    }
    for (const Recompute& r : recompute_ladder(e.segments, e.partial, e.partial_cost)) {
      if (r == all(e)) break;
      PlanResult p = plan(e, r);
      if (p.needed_bytes() <= target) {
        e.chosen = r;
        plans[i] = p;
        break;
      }
    }
  }
  for (size_t i = 0; i < entries_.size(); ++i) {
    reports_[i].arena_bytes = plans[i].needed_bytes();
    reports_[i].kernels = plans[i].kernels;
    reports_[i].recomputed = entries_[i].chosen.full + entries_[i].chosen.partial;
    reports_[i].partially_recomputed = entries_[i].chosen.partial;
    reports_[i].peak_at = plans[i].needed_peak_at();
    reports_[i].live_bytes = plans[i].live_bytes;
  }
  // Without a budget the arena is the largest fully recomputing plan (what startup.json reports
  // as needed); with one, what the chosen plans need (at most the budget); a forced choice may
  // need more than either.
  size_t arena = largest;
  if (arena_budget_ > largest || forced_) {
    arena = 0;
    for (const PlanResult& p : plans) arena = std::max(arena, p.needed_bytes());
  }
  DF_CHECK(arena <= available_bytes, "the forced recomputation needs an activation arena of "
                                         << gib(arena) << " (" << arena << " bytes) but only " << gib(available_bytes)
                                         << " are available; recompute more layers (--recompute=F+P)");
  ctx_.reserve_arena(arena);
  arena_bytes_ = arena;
#ifdef DFLASH_CUDA
  // The arena is free until recording: it holds the tuning's scratch operands.
  if (ctx_.gemm_tuning() && ctx_.device().is_cuda()) {
    if (progress) progress("tuning GEMMs");
    gemm_tuning_summary_ = tune_gemms(ctx_, ctx_.arena_base(), ctx_.arena_bytes(), kGemmTuningReps).summary();
  }
#endif
  for (size_t i = 0; i < entries_.size(); ++i) {
    const Entry& e = entries_[i];
    if (progress) progress("recording " + e.name);
    Program p = record_program(ctx_, e.name, [&] { e.body(e.chosen); }, plans[i].placement);
    DF_CHECK(p.arena_bytes() == reports_[i].arena_bytes && p.kernels() == reports_[i].kernels,
             "program '" << e.name << "': the recording (" << p.kernels() << " kernels, " << p.arena_bytes()
                         << " bytes) differs from its plan (" << reports_[i].kernels << " kernels, "
                         << reports_[i].arena_bytes << " bytes): the body branched on something other than "
                         << "its configuration");
    reports_[i].record_ms = p.record_ms();
    programs_.emplace(e.name, std::move(p));
  }
  entries_.clear();  // the bodies may hold references that must not outlive startup
  ctx_.seal();
}

const Program& Engine::program(const std::string& name) const {
  auto it = programs_.find(name);
  DF_CHECK(it != programs_.end(), "no program '" << name << "' was recorded at startup");
  return it->second;
}

size_t available_memory_bytes(Device device) {
  if (device.is_cuda()) {
#ifdef DFLASH_CUDA
    return cuda_backend::free_memory(device.index);
#else
    return 0;
#endif
  }
  std::ifstream in("/proc/meminfo");
  std::string key;
  size_t kb = 0;
  std::string unit;
  while (in >> key >> kb >> unit)
    if (key == "MemAvailable:") return kb * 1024;
  return size_t(1) << 34;
}

}  // namespace dflash

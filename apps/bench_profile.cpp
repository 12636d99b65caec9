// dflash-bench profile's measuring part: replays recorded programs with CUPTI collecting the
// kernels' own times (GPU) or with each recorded call timed (CPU), then prints the per-op table,
// one JSON line per row and a summary, and fails when the kernels do not account for the replay.
#include <algorithm>
#include <chrono>
#include <cstdio>

#include "apps/bench.h"
#include "runtime/context.h"
#ifdef DFLASH_CUDA
#include "runtime/cuda/cuda_backend.h"
#include "runtime/cuda/cupti_profiler.h"
#endif

namespace dflash {

void profile_track_graph_nodes() {
#ifdef DFLASH_CUDA
  cupti_track_graph_nodes();
#else
  DF_FAIL("dflash-bench profile --cuda: this build has no CUDA backend");
#endif
}

bool profile_replays(Context& ctx, ProfileLog& log, bool cuda, const std::vector<std::string>& programs,
                     const std::function<void()>& replay, int replays, double visible_pairs, const std::string& title,
                     const std::string& summary_json, bool replay_waits) {
  using Clock = std::chrono::steady_clock;
  (void)replay_waits;  // CUDA only
  for (int i = 0; i < 3; ++i) replay();  // warm-up
  ctx.synchronize();
  for (ProfiledCall& c : log.calls()) c.cpu_ms = 0, c.cpu_runs = 0;
  std::vector<double> measured;
#ifdef DFLASH_CUDA
  // The step's own time: the replays submitted while the stream is held, so they run back to
  // back with no host launch latency in the time (CUPTI's tracing lengthens the launch of a graph
  // of many small kernels), timed without CUPTI (which also lengthens each kernel a little) and
  // averaged. Replays that wait for the device are timed as they run, waits included.
  CuptiReplayTimes ct;
  auto timed = [&](const std::function<void()>& submit) {
    return replay_waits ? cuda_backend::time_ms(ctx.cuda_stream(), submit)
                        : cuda_backend::time_ms_submitted_ahead(ctx.cuda_stream(), submit);
  };
  if (cuda) {
    ctx.synchronize();
    measured.push_back(timed([&] {
                         for (int i = 0; i < replays; ++i) replay();
                       }) /
                       double(replays));
    ctx.synchronize();
    cupti_start();
  }
#endif
  // Traced, the replays are submitted ahead and timed in the same way: the time the kernels and
  // the gaps between them must add up to.
  double traced_ms = 0;
#ifdef DFLASH_CUDA
  if (cuda)
    traced_ms = timed([&] {
                  for (int i = 0; i < replays; ++i) replay();
                }) /
                double(replays);
#endif
  for (int i = 0; i < replays && !cuda; ++i) {
    ctx.synchronize();
    auto a = Clock::now();
    replay();
    measured.push_back(std::chrono::duration<double, std::milli>(Clock::now() - a).count());
  }
  ctx.synchronize();
#ifdef DFLASH_CUDA
  if (cuda) ct = cupti_stop(log, replays);
#endif
  // The calls of the profiled programs, with their times.
  std::vector<ProfiledCall> calls;
  std::vector<double> times;
  for (size_t i = 0; i < log.calls().size(); ++i) {
    const ProfiledCall& c = log.calls()[i];
    if (std::find(programs.begin(), programs.end(), c.program) == programs.end()) continue;
    calls.push_back(c);
#ifdef DFLASH_CUDA
    if (cuda) {
      times.push_back(ct.call_ms[i]);
      continue;
    }
#endif
    times.push_back(c.cpu_ms);
  }
  ProfileTableInput in;
  double mean = 0;
  for (double m : measured) mean += m / double(measured.size());
  in.measured_ms = mean;
  in.traced_ms = traced_ms;
  in.visible_pairs = visible_pairs;
  in.rows = profile_rows(calls, times, replays, visible_pairs);
  bool ok = true;
#ifdef DFLASH_CUDA
  if (cuda) in.idle_bound_ms = std::max(0.0, (ct.span_ms - ct.busy_ms) / double(replays));
#endif
  std::printf("%s", format_profile_table(title, in).c_str());
  for (const ProfileRow& r : in.rows)
    std::printf("{\"profile_row\":{\"program\":\"%s\",\"phase\":\"%s\",\"op\":\"%s\",\"shape\":\"%s\","
                "\"calls\":%lld,\"ms\":%.6f,\"flop\":%.17g,\"bytes\":%.17g}}\n",
                r.program.c_str(), r.phase.c_str(), r.op.c_str(), r.shape.c_str(), (long long)r.calls, r.ms, r.flop,
                r.bytes);
  std::printf("{\"profile\":{%s,\"measured_ms\":%.6f,\"traced_ms\":%.6f,\"idle_ms\":%.6f,\"traced_gaps_ms\":%.6f,"
              "\"visible_pairs\":%.17g}}\n",
              summary_json.c_str(), in.measured_ms, in.traced_ms, profile_idle_ms(in), in.idle_bound_ms,
              in.visible_pairs);
#ifdef DFLASH_CUDA
  if (cuda) {
    std::printf("CUPTI: %lld activity records over %d replays (%lld attributed by launch order); %s\n",
                (long long)ct.records, replays, (long long)ct.by_order, log.node_report().c_str());
    if (ct.unattributed > 0) {
      std::printf("ERROR: %lld of %lld GPU activity records belong to no recorded call (e.g. %s)\n",
                  (long long)ct.unattributed, (long long)ct.records, ct.unattributed_example.c_str());
      ok = false;
    }
  }
#endif
  const double mismatch = profile_mismatch(in);
  if (mismatch > 0.05) {
    std::printf("ERROR: the kernels (%.3f ms, with at most %.3f ms of gaps between them) do not account for the "
                "%s %.3f ms replay (%.1f%% outside, more than 5%%): the profile is not trustworthy\n",
                profile_kernel_ms(in), in.idle_bound_ms, in.traced_ms > 0 ? "traced" : "measured",
                profile_reference_ms(in), 100 * mismatch);
    ok = false;
  }
  return ok;
}

}  // namespace dflash

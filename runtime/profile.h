// The profiler's bookkeeping: while a context records with a ProfileLog attached, every kernel
// call is labelled (program, op, phase, GEMM shape) with the work it does (FLOP or bytes); the
// measured times (CPU: per recorded call; CUDA: CUPTI kernel records) are summed per label.
#pragma once
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dflash {

// The work of one kernel call as docs/MODEL.md, "FLOP counting", counts it. flop_per_pair is for attention,
// whose work depends on the anchors: FLOP per visible (query, key) pair, multiplied out when
// the table is made (ProfileTableInput::visible_pairs).
// A GEMM call's dimensions: C[M,N] = op(A) op(B), contiguous operands (what the shape text says).
struct GemmShape {
  int64_t M = 0, N = 0, K = 0;
  bool ta = false, tb = false, c_bf16 = false;
  bool operator==(const GemmShape&) const = default;
};

struct CallCost {
  double flop = 0;
  double bytes = 0;
  double flop_per_pair = 0;
  std::string shape;  // e.g. "M=8192 N=4096 K=4096 NT" for a GEMM; empty for other ops
  GemmShape gemm;     // a GEMM's dimensions (M = 0 for other ops)
};

struct ProfiledCall {
  std::string program, op, phase;  // phase: forward, backward or recompute
  CallCost cost;
  double cpu_ms = 0;  // CPU replays: time spent in this call over all timed replays
  int64_t cpu_runs = 0;
};

// One per profiled context. Not thread-safe: a profile runs one worker.
class ProfileLog {
 public:
  // Called by Context when a recording submits a kernel call; returns the call's index.
  int64_t add_call(const std::string& program, const char* op, const char* phase, CallCost cost);
  std::vector<ProfiledCall>& calls() { return calls_; }
  const std::vector<ProfiledCall>& calls() const { return calls_; }
  // CUDA: graph node id -> call index. Nodes made by stream capture belong to the current call;
  // the instantiated graph's nodes (which activity records name) inherit their original's call,
  // by CUPTI's original-node link or, failing that, by creation order (a one-stream capture is
  // a chain, instantiated in the same order).
  const std::unordered_map<uint64_t, int64_t>& node_calls() const { return node_calls_; }
  void on_graph_node(uint64_t node, uint64_t original);  // original 0 when unknown
  void begin_capture();
  void begin_instantiate();
  void end_instantiate();
  int64_t current_call() const { return current_; }
  std::string node_report() const;  // how the nodes were mapped, for the profile's log
  // Per program: the call of each captured node, in capture order.
  const std::vector<std::pair<std::string, std::vector<int64_t>>>& capture_orders() const { return orders_; }

 private:
  std::vector<ProfiledCall> calls_;
  std::unordered_map<uint64_t, int64_t> node_calls_;
  std::vector<uint64_t> captured_, instantiated_;  // this recording's nodes, in creation order
  std::vector<std::pair<std::string, std::vector<int64_t>>> orders_;
  bool instantiating_ = false;
  int64_t current_ = -1;
  int64_t by_original_ = 0, by_order_ = 0, unmatched_ = 0;
};

// The log whose calls are being captured on this thread (for the CUPTI callbacks), or null.
ProfileLog* capturing_profile_log();
void set_capturing_profile_log(ProfileLog* log);

// One row of the table: every call with the same program, phase, op and shape.
struct ProfileRow {
  std::string program, phase, op, shape;
  int64_t calls = 0;  // per replay
  double ms = 0;      // per replay
  double flop = 0, bytes = 0;
};

struct ProfileTableInput {
  std::vector<ProfileRow> rows;
  double measured_ms = 0;   // the replay's own time (events or wall clock), per replay, untraced
  // CUDA: the same replays queued back to back under CUPTI tracing, per replay (0 on the CPU). The
  // kernels' times come from these replays, so they must account for this time; tracing also
  // lengthens each kernel a little (the target at 4096 on the H200: 5.9 ms over its 1266 kernels),
  // which traced_ms - measured_ms shows.
  double traced_ms = 0;
  // CUDA: the gaps between kernels over the traced replays (inside graph launches and between
  // them), per replay: the most idle time the kernels may leave unaccounted.
  double idle_bound_ms = 0;
  double visible_pairs = 0;  // attention (query, key) pairs of the profiled batch
};

// Groups calls by (program, phase, op, shape), per replay; times[i] is call i's total over
// `replays` replays (ms). Attention FLOP is flop_per_pair x visible_pairs.
std::vector<ProfileRow> profile_rows(const std::vector<ProfiledCall>& calls, const std::vector<double>& times_ms,
                                     int64_t replays, double visible_pairs);

// The printed table, sorted by time: op, calls, ms, share, TFLOP or GB, TFLOP/s or GB/s, then
// the sum of kernel time (+ idle) against the measured replay time.
std::string format_profile_table(const std::string& title, const ProfileTableInput& in);

// The kernels' time per replay: the rows' sum.
double profile_kernel_ms(const ProfileTableInput& in);
// The replay time the kernels must account for: traced_ms where there is one, else measured_ms.
double profile_reference_ms(const ProfileTableInput& in);

// The time with no kernel running in the measured replay: measured - kernels, within
// [0, idle_bound_ms] (0 on the CPU, where the bound is 0).
double profile_idle_ms(const ProfileTableInput& in);

// How far the measured replay lies outside [kernels, kernels + idle_bound_ms], relative to it:
// the check that the kernels account for the replay (on the CPU |kernels - measured| / measured).
double profile_mismatch(const ProfileTableInput& in);

// RAII: names the phase (backward, recompute) of the kernel calls made in its scope.
class PhaseScope {
 public:
  explicit PhaseScope(const char* phase);
  ~PhaseScope();

 private:
  const char* previous_;
};
const char* current_phase();

// Adds a GEMM's cost (2 M N K FLOP, its shape) to the next kernel call of the current context.
void note_gemm_cost(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool c_bf16);
// Adds a memory-bound call's cost (bytes read + written once) to the next kernel call.
void note_bytes_cost(double bytes);
// Adds an attention call's cost (FLOP per visible pair) to the next kernel call.
void note_pair_cost(double flop_per_pair, const std::string& what);
// Adds a call's FLOP (not a GEMM, not per drafter pair: the target's causal attention) to the next kernel call.
void note_flop_cost(double flop, const std::string& what);

}  // namespace dflash

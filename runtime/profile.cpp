// Profile bookkeeping: call labels, grouping into rows, and the printed table.
#include "runtime/profile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <sstream>
#include <tuple>

#include "runtime/context.h"
#include "runtime/error.h"

namespace dflash {

namespace {
thread_local ProfileLog* t_capturing = nullptr;
thread_local const char* t_phase = "forward";

void note_cost(CallCost c) {
  Context* ctx = Context::current_or_null();
  if (ctx && ctx->profile_log()) ctx->set_pending_cost(std::move(c));
}

std::string fmt(const char* f, double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, f, v);
  return buf;
}
}  // namespace

int64_t ProfileLog::add_call(const std::string& program, const char* op, const char* phase, CallCost cost) {
  calls_.push_back({program, op ? op : "(no op)", phase ? phase : "forward", std::move(cost), 0.0, 0});
  current_ = int64_t(calls_.size()) - 1;
  return current_;
}

void ProfileLog::begin_capture() {
  captured_.clear();
  instantiated_.clear();
  instantiating_ = false;
}

void ProfileLog::on_graph_node(uint64_t node, uint64_t original) {
  if (!instantiating_) {
    if (current_ < 0) return;
    node_calls_.emplace(node, current_);
    captured_.push_back(node);
    return;
  }
  auto it = original ? node_calls_.find(original) : node_calls_.end();
  if (it != node_calls_.end()) {
    node_calls_.emplace(node, it->second);
    ++by_original_;
  } else {
    instantiated_.push_back(node);
  }
}

void ProfileLog::begin_instantiate() {
  current_ = -1;
  instantiating_ = true;
}

void ProfileLog::end_instantiate() {
  instantiating_ = false;
  std::vector<int64_t> order;
  for (uint64_t n : captured_) order.push_back(node_calls_.at(n));
  orders_.emplace_back(order.empty() ? std::string() : calls_[size_t(order.front())].program, std::move(order));
  if (instantiated_.size() == captured_.size()) {
    for (size_t i = 0; i < instantiated_.size(); ++i) node_calls_.emplace(instantiated_[i], node_calls_.at(captured_[i]));
    by_order_ += int64_t(instantiated_.size());
  } else {
    unmatched_ += int64_t(instantiated_.size());
  }
  captured_.clear();
  instantiated_.clear();
}

std::string ProfileLog::node_report() const {
  std::ostringstream os;
  os << node_calls_.size() << " graph nodes mapped to calls (" << by_original_ << " instantiated nodes by their original, "
     << by_order_ << " by creation order, " << unmatched_ << " unmatched)";
  return os.str();
}

ProfileLog* capturing_profile_log() { return t_capturing; }
void set_capturing_profile_log(ProfileLog* log) { t_capturing = log; }

PhaseScope::PhaseScope(const char* phase) : previous_(t_phase) { t_phase = phase; }
PhaseScope::~PhaseScope() { t_phase = previous_; }
const char* current_phase() { return t_phase; }

void note_gemm_cost(int64_t M, int64_t N, int64_t K, bool ta, bool tb, bool c_bf16) {
  if (!Context::current_or_null() || !Context::current().profile_log()) return;
  CallCost c;
  c.flop = 2.0 * double(M) * double(N) * double(K);
  c.gemm = GemmShape{M, N, K, ta, tb, c_bf16};
  std::ostringstream os;
  os << "gemm M=" << M << " N=" << N << " K=" << K << " " << (ta ? 'T' : 'N') << (tb ? 'T' : 'N')
     << (c_bf16 ? " ->bf16" : " ->f32");
  c.shape = os.str();
  note_cost(std::move(c));
}

void note_bytes_cost(double bytes) {
  if (!Context::current_or_null() || !Context::current().profile_log()) return;
  CallCost c;
  c.bytes = bytes;
  note_cost(std::move(c));
}

void note_pair_cost(double flop_per_pair, const std::string& what) {
  if (!Context::current_or_null() || !Context::current().profile_log()) return;
  CallCost c;
  c.flop_per_pair = flop_per_pair;
  c.shape = what;
  note_cost(std::move(c));
}

void note_flop_cost(double flop, const std::string& what) {
  if (!Context::current_or_null() || !Context::current().profile_log()) return;
  CallCost c;
  c.flop = flop;
  c.shape = what;
  note_cost(std::move(c));
}

std::vector<ProfileRow> profile_rows(const std::vector<ProfiledCall>& calls, const std::vector<double>& times_ms,
                                     int64_t replays, double visible_pairs) {
  DF_CHECK(times_ms.size() == calls.size(), "profile: " << times_ms.size() << " times for " << calls.size() << " calls");
  DF_CHECK(replays > 0, "profile: no replays were timed");
  std::map<std::tuple<std::string, std::string, std::string, std::string>, ProfileRow> rows;
  for (size_t i = 0; i < calls.size(); ++i) {
    const ProfiledCall& c = calls[i];
    ProfileRow& r = rows[{c.program, c.phase, c.op, c.cost.shape}];
    r.program = c.program, r.phase = c.phase, r.op = c.op, r.shape = c.cost.shape;
    r.calls += 1;
    r.ms += times_ms[i] / double(replays);
    r.flop += c.cost.flop + c.cost.flop_per_pair * visible_pairs;
    r.bytes += c.cost.bytes;
  }
  std::vector<ProfileRow> out;
  for (auto& kv : rows) out.push_back(kv.second);
  std::stable_sort(out.begin(), out.end(), [](const ProfileRow& a, const ProfileRow& b) { return a.ms > b.ms; });
  return out;
}

double profile_kernel_ms(const ProfileTableInput& in) {
  double kernels = 0;
  for (const ProfileRow& r : in.rows) kernels += r.ms;
  return kernels;
}

double profile_reference_ms(const ProfileTableInput& in) { return in.traced_ms > 0 ? in.traced_ms : in.measured_ms; }

double profile_idle_ms(const ProfileTableInput& in) {
  return std::clamp(profile_reference_ms(in) - profile_kernel_ms(in), 0.0, std::max(0.0, in.idle_bound_ms));
}

double profile_mismatch(const ProfileTableInput& in) {
  const double reference = profile_reference_ms(in);
  if (reference <= 0) return 0;
  const double kernels = profile_kernel_ms(in), most = kernels + std::max(0.0, in.idle_bound_ms);
  if (reference < kernels) return (kernels - reference) / reference;
  if (reference > most) return (reference - most) / reference;
  return 0;
}

std::string format_profile_table(const std::string& title, const ProfileTableInput& in) {
  double flop = 0;
  for (const ProfileRow& r : in.rows) flop += r.flop;
  const double kernels = profile_kernel_ms(in), idle = profile_idle_ms(in), total = kernels + idle;
  std::ostringstream os;
  os << title << "\n";
  char line[512];
  std::snprintf(line, sizeof line, "%-10s %-10s %-22s %-40s %6s %10s %6s %10s %12s\n", "program", "phase", "op",
                "shape", "calls", "ms", "share", "TFLOP|GB", "TFLOP/s|GB/s");
  os << line;
  for (const ProfileRow& r : in.rows) {
    std::string work = "-", rate = "-";
    if (r.flop > 0) {
      work = fmt("%.3f", r.flop / 1e12) + " TF";
      if (r.ms > 0) rate = fmt("%.1f", r.flop / 1e12 / (r.ms / 1e3));
    } else if (r.bytes > 0) {
      work = fmt("%.3f", r.bytes / 1e9) + " GB";
      if (r.ms > 0) rate = fmt("%.1f", r.bytes / 1e9 / (r.ms / 1e3)) + " GB/s";
    }
    std::snprintf(line, sizeof line, "%-10s %-10s %-22s %-40s %6lld %10.3f %5.1f%% %10s %12s\n", r.program.c_str(),
                  r.phase.c_str(), r.op.c_str(), r.shape.empty() ? "-" : r.shape.c_str(), (long long)r.calls, r.ms,
                  total > 0 ? 100.0 * r.ms / total : 0.0, work.c_str(), rate.c_str());
    os << line;
  }
  if (idle > 0) {
    std::snprintf(line, sizeof line, "%-10s %-10s %-22s %-40s %6s %10.3f %5.1f%%\n", "-", "-", "(no kernel running)", "-",
                  "-", idle, total > 0 ? 100.0 * idle / total : 0.0);
    os << line;
  }
  const double rate = in.measured_ms > 0 ? flop / 1e12 / (in.measured_ms / 1e3) : 0.0;
  if (in.traced_ms > 0) {
    int64_t calls = 0;
    for (const ProfileRow& r : in.rows) calls += r.calls;
    std::snprintf(line, sizeof line,
                  "kernels %.3f ms + idle %.3f ms = %.3f ms; traced replay %.3f ms (outside [kernels, kernels + %.3f "
                  "ms of traced gaps] by %.2f%%); untraced replay %.3f ms (tracing adds %.3f ms, %.2f us a call); "
                  "%.3f TFLOP counted, %.1f TFLOP/s over the untraced time\n",
                  kernels, idle, total, in.traced_ms, std::max(0.0, in.idle_bound_ms), 100.0 * profile_mismatch(in),
                  in.measured_ms, in.traced_ms - in.measured_ms,
                  calls > 0 ? 1e3 * (in.traced_ms - in.measured_ms) / double(calls) : 0.0, flop / 1e12, rate);
  } else {
    std::snprintf(line, sizeof line,
                  "kernels %.3f ms + idle %.3f ms = %.3f ms; measured replay %.3f ms (outside [kernels, kernels + "
                  "%.3f ms of traced gaps] by %.2f%%); %.3f TFLOP counted, %.1f TFLOP/s over the measured time\n",
                  kernels, idle, total, in.measured_ms, std::max(0.0, in.idle_bound_ms), 100.0 * profile_mismatch(in),
                  flop / 1e12, rate);
  }
  os << line;
  return os.str();
}

}  // namespace dflash

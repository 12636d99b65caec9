// Step records (fixed layout, gathered in the update program) and the startup agreement texts.
#include "train/step_record.h"

#include <algorithm>
#include <cstring>

#include "train/config_keys.h"

namespace dflash {

namespace {
struct Header {
  int32_t stop = 0;
  int32_t micro_batches = 0;
};
}  // namespace

size_t step_record_bytes(int64_t k) { return sizeof(Header) + size_t(k) * sizeof(SlotFigures); }

void write_step_record(uint8_t* out, bool stop, const SlotFigures* slots, int64_t k) {
  Header h{stop ? 1 : 0, int32_t(k)};
  std::memcpy(out, &h, sizeof h);
  std::memcpy(out + sizeof h, slots, size_t(k) * sizeof(SlotFigures));
}

void read_step_records(const uint8_t* records, int world, int64_t k, GatheredStep& out) {
  out.slots.resize(size_t(world) * size_t(k));
  out.stopping.clear();
  out.tokens = 0;
  const size_t bytes = step_record_bytes(k);
  for (int r = 0; r < world; ++r) {
    const uint8_t* rec = records + size_t(r) * bytes;
    Header h;
    std::memcpy(&h, rec, sizeof h);
    DF_CHECK(h.micro_batches == k, "step record of rank " << r << " holds " << h.micro_batches
                                                          << " micro-batches, expected " << k
                                                          << " (the ranks run different training.grad_accum)");
    if (h.stop) out.stopping.push_back(r);
    std::memcpy(out.slots.data() + size_t(r) * size_t(k), rec + sizeof h, size_t(k) * sizeof(SlotFigures));
  }
  for (const SlotFigures& s : out.slots) out.tokens += s.tokens;
}

StepRecord step_figures(const GatheredStep& g, const std::vector<Bucket>& buckets) {
  StepRecord r;
  double n = 0, tau_n = 0;
  std::vector<int> used;
  for (const SlotFigures& f : g.slots) {
    StepResult s;
    s.loss = f.loss;
    std::copy(f.sums, f.sums + 7, s.sums);
    r.loss += s.loss;
    r.accuracy += s.accuracy();
    if (s.sums[5] > 0) {
      r.tau += s.tau();
      tau_n += 1;
    }
    n += 1;
    if (std::find(used.begin(), used.end(), f.bucket) == used.end()) used.push_back(f.bucket);
  }
  r.loss /= n;
  r.accuracy /= n;
  r.tau = tau_n > 0 ? r.tau / tau_n : 0.0;
  std::sort(used.begin(), used.end(), [&](int a, int b) { return buckets[size_t(a)].seq < buckets[size_t(b)].seq; });
  for (int b : used) r.bucket += (r.bucket.empty() ? "" : "+") + std::to_string(buckets[size_t(b)].seq);
  return r;
}

std::string config_fingerprint(const Config& cfg) {
  Config c = cfg;
  std::string out;
  for (const config_detail::Field& f : config_detail::fields()) {
    const std::string key = f.key;
    if (key == "runtime.devices" || key == "runtime.cpu_workers" || key == "runtime.memory_limit_gb" ||
        key == "metrics.progress")
      continue;
    out += key + " = " + config_detail::value_text(c, f) + "\n";
  }
  for (const Bucket& b : cfg.buckets) out += "bucket = " + b.str() + "\n";
  return out;
}

std::string program_signature(const Engine* engine, const ParameterStore& params) {
  std::string out = "parameters = " + std::to_string(params.padded_numel()) + " floats in " +
                    std::to_string(params.specs().size()) + " tensors\n";
  if (!engine) return out + "programs = none (eager mode)\n";
  for (const ProgramReport& p : engine->report())
    out += "program " + p.name + " = bucket " + p.bucket.str() + ", " + std::to_string(p.kernels) + " kernels, arena " +
           std::to_string(p.arena_bytes) + " bytes\n";
  return out;
}

}  // namespace dflash

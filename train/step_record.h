// What each rank contributes to a step's figures: its micro-batches' results and its stop flag,
// as fixed-size bytes that the update program gathers from every rank (rank order), so that every
// rank holds the figures of all micro-batches in (rank, micro-batch) order and rank 0 logs what a
// one-process run would. Plus the descriptions the ranks compare at startup.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "graphs/engine.h"
#include "runtime/optimizer.h"
#include "train/bucket_step.h"
#include "train/config.h"
#include "train/train_log.h"

namespace dflash {

struct SlotFigures {
  float loss = 0;
  int32_t bucket = 0;
  double sums[7] = {};  // StepResult::sums
  int64_t tokens = 0;   // real tokens of the micro-batch
};

// Bytes of one rank's record for k micro-batches.
size_t step_record_bytes(int64_t micro_batches);
// One rank's record: its stop flag (a signal arrived) and its micro-batches' figures.
void write_step_record(uint8_t* out, bool stop, const SlotFigures* slots, int64_t micro_batches);

struct GatheredStep {
  std::vector<SlotFigures> slots;  // world * k, rank-major
  std::vector<int> stopping;       // ranks whose stop flag was set
  int64_t tokens = 0;
};
// Reads every rank's record (world of them) into out without allocating once sized.
void read_step_records(const uint8_t* records, int world, int64_t micro_batches, GatheredStep& out);

// The step's figures from all micro-batches: means over them in (rank, micro-batch) order (tau
// over those with blocks); the buckets used; tokens. grad norm, lr and times are the caller's.
StepRecord step_figures(const GatheredStep& g, const std::vector<Bucket>& buckets);

// What every rank of a run must agree on, one "key = value" line each: the configuration (without
// the per-node keys runtime.devices, runtime.cpu_workers, runtime.memory_limit_gb and
// metrics.progress), and the recorded programs with the parameter layout.
std::string config_fingerprint(const Config& cfg);
std::string program_signature(const Engine* engine, const ParameterStore& params);

}  // namespace dflash

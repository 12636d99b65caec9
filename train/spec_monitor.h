// The real acceptance length during training ([eval] spec_prompts, spec_every,
// spec_max_new_tokens): every replica gets a speculative decoder over its own target and drafter
// (recorded at startup like its training programs), the prompts are split across the replicas,
// and each measurement decodes them with the current weights and reports SpecFigures (no
// target-alone baseline: training logs tau, not the speedup).
#pragma once
#include <memory>
#include <string>
#include <vector>

#include "train/replica.h"
#include "train/spec_eval.h"

namespace dflash {

class SpecMonitor {
 public:
  // Reads eval.spec_prompts (checked against the target), the stop ids, and records one decoder
  // per replica. `log` receives one startup line.
  SpecMonitor(const Config& cfg, const std::vector<Replica*>& replicas,
              const std::function<void(const std::string&)>& log);
  ~SpecMonitor();

  // Decodes every prompt with the drafter: replica r takes prompts r, r + W, ... in its own
  // thread; the figures are taken over all prompts in file order.
  SpecFigures measure();

  size_t prompts() const { return prompts_.size(); }

 private:
  std::vector<SpecPrompt> prompts_;
  std::vector<int32_t> stop_ids_;
  int64_t max_new_ = 0, block_size_ = 0;
  uint64_t seed_ = 0;  // eval.spec_seed: the sampling streams
  std::vector<std::unique_ptr<SpecDecoder>> decoders_;  // one per replica
};

}  // namespace dflash

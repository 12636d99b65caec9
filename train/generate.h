// `dflash-train generate`: regenerate responses with the target (docs/USER_GUIDE.md, "Regenerating
// responses with the target"). Reads prompts, decodes them in batches from recorded programs
// (model/batch_generator.h), appends one record per prompt to a resumable output, and under
// torchrun or Slurm takes this rank's share and writes its own part; the parts merge by id.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <vector>

#include "dist/launch.h"
#include "train/config.h"

namespace dflash {

struct GenerateCommandOptions {
  std::filesystem::path prompts;  // JSONL {"id", "prompt_ids"} per line
  std::filesystem::path output;   // OUT.jsonl (rank K of W > 1 appends to OUT.jsonl.rank-K)
  std::optional<LaunchInfo> launch;  // this process's rank; empty: read from the launcher's variables
  // Test hooks (empty and false in real use): BatchGenerator's slot order and top-p-ignoring sampler.
  std::vector<int64_t> slot_order;
  bool ignore_top_p = false;
};

struct GenerateSummary {
  int64_t prompts = 0;      // in the prompts file
  int64_t share = 0;        // this rank's share of them
  int64_t skipped = 0;      // of the share, already written (by any rank, any earlier run)
  int64_t generated = 0;    // decoded now
  int64_t new_tokens = 0;   // by this run
  int64_t stopped = 0;      // of those generated, ended by a stop id
  double seconds = 0;       // decoding (prefills included), model loading excluded
  int64_t written = 0;      // prompts with a record in any part at the end
  bool merged = false;      // OUT now holds every prompt's record, in the prompts' order
};

// Refuses bad input before anything is decoded: the prompts file (each problem naming its line
// and the fix), the settings, an output made with other settings (naming each difference), a cache
// that does not fit (with the numbers and the largest batch that fits).
GenerateSummary run_generate(const Config& cfg, const GenerateCommandOptions& options);

}  // namespace dflash

// What a checkpoint must share with the run that resumes it: the drafter's shape, block size, mask
// token and target layer ids, and the target itself (its dims and the CRC-32 of its embedding and
// lm_head, so a fine-tune under the same config.json is another target while an edit of config.json
// that changes nothing computed is not). Saved in each checkpoint's state.json under "identity".
#pragma once
#include <filesystem>

#include <nlohmann/json.hpp>

#include "model/target.h"
#include "train/job.h"

namespace dflash {

inline constexpr const char* kIdentityKey = "identity";

// A flat object {"drafter.num_hidden_layers": 2, ..., "target.layer_ids": [1], "target.hidden_size": 64,
// ..., "target.embed_tokens.crc32": "1a2b3c4d", "target.lm_head.crc32": "..."}. Reads the target's
// embedding and lm_head bytes once (about a second per GB).
nlohmann::ordered_json run_identity(const DrafterSpec& drafter, const TargetSpec& target, const TargetChecksums& sums);
nlohmann::ordered_json job_identity(const Job& job);

// Refuses to resume from `checkpoint` when its recorded identity differs from `now`, naming every
// differing key with both values. Keys recorded on one side only are not compared. A checkpoint
// saved without an identity (an older build) is checked on its drafter_config.json alone, and
// `warn` says that the target could not be checked.
void check_resume_identity(const std::filesystem::path& checkpoint, const nlohmann::json& now, const LogFn& warn);

}  // namespace dflash

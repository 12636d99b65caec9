// Run identity: built from the specs and target checksums, compared key by key on resume.
#include "train/run_identity.h"

#include "model/target.h"
#include "runtime/fileio.h"
#include "train/export.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

void add_drafter(nlohmann::ordered_json& j, const DrafterSpec& d) {
  j["drafter.num_hidden_layers"] = d.num_hidden_layers;
  j["drafter.hidden_size"] = d.hidden_size;
  j["drafter.intermediate_size"] = d.intermediate_size;
  j["drafter.num_attention_heads"] = d.num_attention_heads;
  j["drafter.num_key_value_heads"] = d.num_key_value_heads;
  j["drafter.head_dim"] = d.head_dim;
  j["drafter.vocab_size"] = d.vocab_size;
  j["drafter.rms_norm_eps"] = d.rms_norm_eps;
  j["drafter.rope_theta"] = d.rope_theta;
  j["drafter.block_size"] = d.block_size;
  j["drafter.mask_token_id"] = d.mask_token_id;
  j["target.layer_ids"] = d.target_layer_ids;
}

}  // namespace

nlohmann::ordered_json run_identity(const DrafterSpec& d, const TargetSpec& t, const TargetChecksums& sums) {
  nlohmann::ordered_json j;
  add_drafter(j, d);
  j["target.architecture"] = target_arch_name(t.architecture);
  j["target.hidden_size"] = t.hidden_size;
  j["target.intermediate_size"] = t.intermediate_size;
  j["target.num_hidden_layers"] = t.num_hidden_layers;
  j["target.num_attention_heads"] = t.num_attention_heads;
  j["target.num_key_value_heads"] = t.num_key_value_heads;
  j["target.head_dim"] = t.head_dim;
  j["target.vocab_size"] = t.vocab_size;
  j["target.tie_word_embeddings"] = t.tie_word_embeddings;
  j["target.rms_norm_eps"] = t.rms_norm_eps;
  j["target.rope_theta"] = t.rope_theta;
  j["target.rope_type"] = t.rope_type == RopeType::llama3 ? "llama3" : "default";
  if (t.rope_type == RopeType::llama3) {
    j["target.rope_factor"] = t.rope_factor;
    j["target.rope_low_freq_factor"] = t.rope_low_freq_factor;
    j["target.rope_high_freq_factor"] = t.rope_high_freq_factor;
    j["target.rope_original_max_position_embeddings"] = t.rope_original_max_position_embeddings;
  }
  j["target.embed_tokens.crc32"] = sums.embed_tokens;
  j["target.lm_head.crc32"] = sums.lm_head;
  return j;
}

nlohmann::ordered_json job_identity(const Job& job) {
  return run_identity(job.drafter, job.target, target_checksums(job.cfg.target.path, job.target));
}

void check_resume_identity(const fs::path& checkpoint, const json& now, const LogFn& warn) {
  const std::string what = "resuming from '" + checkpoint.string() + "'";
  json saved;
  const fs::path state_file = checkpoint / "state.json";
  try {
    const json state = json::parse(read_file_text(state_file));
    if (state.is_object() && state.contains(kIdentityKey)) saved = state[kIdentityKey];
  } catch (const json::exception& e) {
    DF_FAIL(what << ": '" << state_file.string() << "' is not valid JSON (" << e.what()
                 << "); fix: the checkpoint is damaged; remove it to resume from an older one");
  }
  if (!saved.is_object()) {
    warn(what + ": the checkpoint records no run identity (it was saved by an older build); the drafter is "
                "checked against its " + kCheckpointDrafterConfig + ", the target cannot be checked");
    if (!fs::exists(checkpoint / kCheckpointDrafterConfig)) return;
    nlohmann::ordered_json from_config;
    add_drafter(from_config, read_drafter_config(checkpoint).spec);
    saved = from_config;
  }
  std::string diffs;
  int count = 0;
  for (const auto& [key, value] : now.items()) {
    if (!saved.contains(key) || saved[key] == value) continue;
    diffs += std::string(count++ ? "; " : "") + key + " = " + saved[key].dump() + " in the checkpoint, " + value.dump() +
             " now";
  }
  DF_CHECK(count == 0, what << ": the checkpoint was made for another run (" << count << " difference"
                            << (count == 1 ? "" : "s") << "): " << diffs
                            << "; fix: resume with the drafter, block size, mask token, target layers and target the "
                            << "checkpoint was made with (its state.json records them under \"" << kIdentityKey
                            << "\"), or start a fresh run in another job.dump_folder (or with checkpoint.resume = false)");
}

}  // namespace dflash

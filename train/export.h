// The exported drafter (docs/MODEL.md, "Files"): config.json + model.safetensors as SGLang's
// and vLLM's DFlash loaders and z-lab's code read them (tests/golden/serving-fields lists every field),
// plus modeling_dflash.py for transformers' AutoModel; writing it, reading it back for a warm start,
// and loading drafter weights from either an export or a checkpoints/step-N directory.
#pragma once
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/drafter_spec.h"
#include "runtime/dtype.h"
#include "runtime/optimizer.h"

namespace dflash {

// The drafter config a checkpoint carries (same format as an export's config.json, float32).
inline constexpr const char* kCheckpointDrafterConfig = "drafter_config.json";

struct ExportedDrafter {
  DrafterSpec spec;         // loss_decay_gamma is not exported and stays 0
  std::string torch_dtype;  // "bfloat16", "float32" or "float16"
};

// config.json's contents for `spec`; dtype f32 -> "float32", bf16 -> "bfloat16".
nlohmann::ordered_json exported_config_json(const DrafterSpec& spec, DType dtype);

// modeling_dflash.py, written beside config.json (auto_map's "AutoModel": "modeling_dflash.DFlashDraftModel"):
// python/export/modeling_dflash.py as it was when this binary was built.
const std::string& exported_model_file();

// Writes out_dir/config.json, out_dir/model.safetensors (tensors named as drafter_param_specs,
// converted from the f32 masters to `dtype`) and out_dir/modeling_dflash.py into a staging directory
// that then replaces out_dir. Refuses NaN/Inf values, and an out_dir that exists and is neither empty
// nor a previous export.
void export_drafter(const std::filesystem::path& out_dir, const DrafterSpec& spec, const ParameterStore& params,
                    DType dtype = DType::bf16);

// Reads and validates dir/config.json (errors name the file and the key).
ExportedDrafter read_exported_config(const std::filesystem::path& dir);
// The same for a parsed config; `source` names it in messages.
ExportedDrafter parse_exported_config(const nlohmann::json& config, const std::string& source);

// "key: X in the file, Y expected" for each field that would change the weights' meaning
// (everything exported except block_size and max_position_embeddings); empty when they agree.
std::vector<std::string> drafter_spec_differences(const DrafterSpec& found, const DrafterSpec& expect);

// Warm start from an export: its config must agree with `expect` (drafter_spec_differences) and
// every tensor must have the parameter's name and shape (BF16/F16/F32, converted to the f32
// masters; NaN/Inf refused). Nothing is written into `params` unless all of it checks out.
void load_exported_weights(const std::filesystem::path& dir, const DrafterSpec& expect, ParameterStore& params);

// What keeps `dir` from being read by load_drafter_weights (nullopt: it is an export with both
// files, or a checkpoint whose files are all present), ending with what is expected instead.
std::optional<std::string> drafter_dir_problem(const std::filesystem::path& dir);

// `eval --drafter DIR` and drafter.init: DIR is an export or a complete checkpoints/step-N directory
// (its params.safetensors; its drafter_config.json, when present, is checked like an export's).
void load_drafter_weights(const std::filesystem::path& dir, const DrafterSpec& expect, ParameterStore& params);

// The drafter config of an export (config.json) or of a checkpoint (drafter_config.json).
ExportedDrafter read_drafter_config(const std::filesystem::path& dir);

// `dflash-train export --checkpoint DIR --out DIR`: the checkpoint's drafter_config.json gives the
// spec. Needs a current context (the weights pass through a ParameterStore).
void export_checkpoint(const std::filesystem::path& checkpoint, const std::filesystem::path& out_dir,
                       DType dtype = DType::bf16);

}  // namespace dflash

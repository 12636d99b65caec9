// Training checkpoints under <dump_folder>/checkpoints/step-N/ (N = optimizer steps done), written
// so that a crash at any moment leaves every earlier checkpoint usable and never a half-written one
// that looks complete; plus the directory commit (stage, fsync, rename) that exports share.
//
// A checkpoint directory holds:
//   params.safetensors     every parameter's f32 master value under its exported name
//   optimizer.safetensors  "m.<name>", "v.<name>" (Adam moments, f32) and "step" (i32 [1])
//   state.json             the caller's state (data position, RNG, config snapshot, ...)
//   drafter_config.json    optional: the drafter's config in the exported format (train/export.h)
//   COMPLETE.json          written last: format, version, step, and each file's bytes and CRC-32
// It is staged in checkpoints/.tmp-step-N-<pid>/ and renamed into place only when complete.
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "model/drafter_spec.h"
#include "runtime/optimizer.h"

namespace dflash {

inline constexpr const char* kCheckpointMarker = "COMPLETE.json";
inline constexpr const char* kCheckpointFormat = "dflash-checkpoint";
inline constexpr int kCheckpointVersion = 1;

// <dump_folder>/checkpoints/step-<step>
std::filesystem::path checkpoint_dir(const std::filesystem::path& dump_folder, int64_t step);

// Writes checkpoints/step-<step> atomically; `step` must equal the optimizer's step counter. An
// existing step-<step> is replaced only once the new one is complete. With `drafter`, the
// checkpoint also holds drafter_config.json, so `export` and `eval --drafter` need nothing else.
// Throws Error naming the path on any failure; earlier checkpoints are never touched.
void save_checkpoint(const std::filesystem::path& dump_folder, int64_t step, const ParameterStore& params,
                     const AdamWOptimizer& optimizer, const nlohmann::json& state,
                     const DrafterSpec* drafter = nullptr);

// What is wrong with a checkpoint directory (nullopt: it is complete). Checks the marker, its
// step against the directory name, and that every listed file exists with the recorded size and,
// when `checksums`, the recorded CRC-32 (this reads every byte).
std::optional<std::string> checkpoint_problem(const std::filesystem::path& dir, bool checksums = true);

// The newest complete checkpoint under <dump_folder>/checkpoints, or nullopt when there is none.
// Every newer checkpoint that is incomplete or damaged is skipped, never loaded, with a warning
// naming the directory and what is wrong; leftover staging directories are ignored with a warning.
std::optional<std::filesystem::path> latest_complete_checkpoint(const std::filesystem::path& dump_folder,
                                                                std::vector<std::string>* warnings = nullptr);

// Restores master values (then syncs the compute copy), Adam m and v and the step counter from a
// complete checkpoint, and returns its state.json. Names, shapes and finiteness (no NaN/Inf in
// parameters or moments; the message names the tensor) are validated before anything is written,
// so a refused checkpoint leaves the store and optimizer as they were.
nlohmann::json load_checkpoint(const std::filesystem::path& dir, ParameterStore& params, AdamWOptimizer& optimizer);

// Keeps the newest `keep` (>= 1) checkpoints that verify completely against their marker (sizes
// and CRC-32, so a checkpoint just written is read back before anything older is deleted), and
// deletes the complete (sizes match) checkpoints older than those, and staging directories left by
// other processes. A checkpoint that does not verify is never counted, never deleted, and named in
// `warnings`; directories without a marker are left alone. The newest checkpoint that verifies is
// therefore never removed.
void prune_checkpoints(const std::filesystem::path& dump_folder, int64_t keep,
                       std::vector<std::string>* warnings = nullptr);

// --- Directory commit, shared with train/export ---

// fsync a directory so that renames and new entries in it survive a crash.
void fsync_directory(const std::filesystem::path& dir);

// Moves the fully written directory `staged` to `target` (a sibling on the same file system):
// when `target` exists it is swapped atomically (renameat2 RENAME_EXCHANGE; else renamed away
// first) and the old content deleted afterwards. fsyncs `staged` before and the parent after.
void publish_directory(const std::filesystem::path& staged, const std::filesystem::path& target);

}  // namespace dflash

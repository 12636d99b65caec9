// Checkpoints of a run whose optimizer state is sharded across ranks (runtime.shard_optimizer),
// and loading any checkpoint into a store of any layout (another world size, sharded or not).
//
// A sharded checkpoints/step-N/ holds:
//   shard-RRRRR-of-WWWWW.safetensors  rank R's slice of the flat buffers: "master", "m", "v" (F32
//                                     [shard]) and "step" (I32 [1]); written by rank R
//   manifest.json                     world, flat sizes, every parameter's name, shape and flat
//                                     offset, and each shard's file and range
//   state.json, drafter_config.json   as in the unsharded layout (train/checkpoint.h)
//   COMPLETE.json                     "layout": "sharded" and every file's bytes and CRC-32;
//                                     written by rank 0 only after every shard is on disk
// It is staged in checkpoints/.tmp-step-N-<pid of rank 0>/ and renamed into place when complete,
// so a crash leaves the previous checkpoints as they were. Every rank must see the same dump
// folder (a shared file system on several nodes).
#pragma once
#include <filesystem>
#include <vector>

#include <nlohmann/json.hpp>

#include "dist/coordinator.h"
#include "model/drafter_spec.h"
#include "runtime/optimizer.h"

namespace dflash {

inline constexpr const char* kShardedManifest = "manifest.json";

// A rank of this process and its state.
struct LocalShard {
  int rank = 0;
  const ParameterStore* params = nullptr;
  const AdamWOptimizer* optimizer = nullptr;
};

// Collective over coord (every process calls it with its own ranks' shards): writes
// checkpoints/step-<step> in the sharded layout and returns its path. On any rank's failure no
// checkpoint appears, earlier ones are untouched, and every process throws the same error.
std::filesystem::path save_sharded_checkpoint(const std::filesystem::path& dump_folder, int64_t step,
                                              const std::vector<LocalShard>& shards, Coordinator& coord,
                                              const nlohmann::json& state, const DrafterSpec* drafter);

bool is_sharded_checkpoint(const std::filesystem::path& dir);

// Restores a complete checkpoint, sharded or not and saved with any world size, into this store
// (its slice of the masters and moments when sharded; its whole compute copy) and returns its
// state.json. Names, shapes and flat offsets are checked before anything is written.
nlohmann::json load_any_checkpoint(const std::filesystem::path& dir, ParameterStore& params, AdamWOptimizer& optimizer);

// The parameters of a complete sharded checkpoint into a store (eval, export, warm start).
void load_sharded_params(const std::filesystem::path& dir, ParameterStore& params, const std::string& what);

}  // namespace dflash

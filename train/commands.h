// The dflash-train subcommands other than training: prepare (JSONL -> token shards), hidden
// (target features -> hidden-state shards for offline mode), eval (a drafter over every valid
// anchor of data.eval) and export (a checkpoint -> the SGLang-loadable drafter format).
#pragma once
#include <filesystem>

#include "train/config.h"
#include "train/eval.h"

namespace dflash {

void run_prepare(const Config& cfg);
struct ClusterSpec;
struct Job;
struct ReplicaOptions;

// The replica the subcommands run on the job's first device: no training; the eval programs
// (`eval`) or the target's feature programs (`features`, for `hidden`).
ReplicaOptions replica_options(const Job& job, bool eval, bool features);

// Under torchrun or srun (or with `cluster`: ranks as threads, in tests) every rank computes the
// features of its contiguous share of the data; rank 0 writes the one index over all shards.
void run_hidden(const Config& cfg, const ClusterSpec* cluster = nullptr);
EvalResult run_eval(const Config& cfg, const std::filesystem::path& drafter_dir);
// Holds --out's lock (beside it) while it writes; a non-empty --out is refused unless overwrite
// (which replaces a previous export; a folder holding other files is refused either way).
void run_export(const std::filesystem::path& checkpoint, const std::filesystem::path& out, const std::string& dtype,
                bool overwrite = false);

}  // namespace dflash

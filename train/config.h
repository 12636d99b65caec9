// The training job's configuration: the TOML file's sections as plain structs, with their
// defaults. Parsing (train/config.cpp) refuses unknown keys, wrong types and bad values with a
// message that names the file, the key, the value and the fix. Every key can be overridden on
// the command line as --section.key=value. docs/config.md documents every key. The structs a
// lower layer uses are defined in that layer (model/target_config.h, data/synthetic_config.h).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "data/synthetic_config.h"
#include "graphs/buckets.h"
#include "model/target_config.h"

namespace dflash {

struct JobConfig {
  std::string name = "dflash";
  std::filesystem::path dump_folder = "runs/dflash";
  uint64_t seed = 0;
};

struct DrafterConfig {
  int64_t num_hidden_layers = 1;
  int64_t intermediate_size = 0;   // 0: the target's
  int64_t num_attention_heads = 0;  // 0: the target's
  int64_t num_key_value_heads = 0;  // 0: the target's
  int64_t head_dim = 0;             // 0: the target's
  int64_t block_size = 16;
  std::optional<int64_t> mask_token_id;  // required
  double loss_decay_gamma = 7.0;  // 0 turns the decay off
  double rms_norm_eps = 1e-6;
  double rope_theta = 0;          // 0: the target's
  double init_std = 0.02;
  std::filesystem::path init;     // warm start: an exported drafter or a checkpoints/step-N dir
};

struct DataConfig {
  std::filesystem::path train;        // JSONL file, or a shard directory written by `prepare`
  std::filesystem::path eval;         // JSONL or shard directory; empty: no eval set
  std::filesystem::path shards;       // where `prepare` writes shards; empty: <dump_folder>/shards
  std::string mode = "online";        // "online" (run the target) or "offline" (read hidden shards)
  std::filesystem::path hidden;       // hidden-state shards (offline); empty: <dump_folder>/hidden
  std::string overflow = "truncate";  // sequences longer than the largest bucket: truncate|skip|error
  uint64_t shuffle_seed = 0;
  bool allow_changed = false;         // resume on changed data: the data order restarts at an epoch's start
  SyntheticDataConfig synthetic;
};

struct TrainingConfig {
  int64_t steps = 100;  // optimizer steps
  double lr = 6e-4, min_lr_ratio = 0.0, warmup_ratio = 0.04;
  double beta1 = 0.9, beta2 = 0.95, eps = 1e-8, weight_decay = 0.01;
  double max_grad_norm = 1.0;  // 0: no clipping
  int64_t grad_accum = 1;      // micro-batches per optimizer step on each worker
  bool checkpointing = true;   // recompute checkpointing, one segment per drafter layer
  int64_t eval_every = 0;      // optimizer steps; 0: only at the end
  int64_t chunk_rows = 1024;   // rows per chunk of the fused lm_head + cross-entropy
};

// [eval]: the real acceptance length during training and the `spec` command's decoding settings
// (docs/MODEL.md, "Speculative decoding").
struct EvalConfig {
  std::filesystem::path spec_prompts;     // JSONL {"input_ids": [...]}; empty: no spec_tau in training
  int64_t spec_every = 0;                 // optimizer steps; 0: before and after training only
  int64_t spec_max_new_tokens = 128;      // new tokens per prompt (also `spec`'s default)
  std::vector<int64_t> spec_stop_token_ids;  // empty: the target's eos_token_id
  bool spec_ignore_eos = false;           // true: no stop token at all
  int64_t spec_prefill_chunk = 128;       // prompt positions per recorded prefill program
  double spec_temperature = 0;            // 0: greedy; > 0: sampled, with speculative rejection sampling
  double spec_top_p = 1;                  // (0, 1]: the nucleus kept when sampling
  int64_t spec_top_k = 0;                 // 0: no cut; else the k most likely tokens when sampling
  uint64_t spec_seed = 0;                 // the sampling streams (one per prompt, keyed by its index)
};

// `dflash-train generate` (docs/USER_GUIDE.md, "Regenerating responses with the target"): batched
// decoding of prompts by the target alone. Stop ids follow eval.spec_stop_token_ids (and
// spec_ignore_eos, else the target's eos_token_id).
struct GenerateConfig {
  int64_t max_new_tokens = 2048;  // new tokens per prompt at most (--max-new-tokens)
  int64_t batch = 32;             // slots: prompts decoded at once (--batch)
  int64_t max_length = 0;         // positions per slot; 0: the longest prompt + max_new_tokens
  int64_t prefill_chunk = 256;    // prompt rows per recorded prefill program
  double temperature = 0;         // 0: greedy (--temperature)
  double top_p = 1;               // (0, 1] (--top-p)
  int64_t top_k = 0;              // 0: no cut (--top-k)
  uint64_t seed = 0;              // the sampling streams, one per prompt keyed by its id (--seed)
  double progress_every_s = 10;   // seconds between progress lines
};

struct RuntimeConfig {
  std::string devices = "auto";  // "auto", "cpu", "cuda" (all GPUs) or "cuda:0,1"
  bool graphs = true;            // false: eager mode, the debugging path
  int64_t cpu_workers = 1;
  double memory_limit_gb = 0;    // 0: what the device has free
  double arena_gb = 0;           // > 0: the arena may grow to this so fewer layers recompute
  bool gemm_tuning = false;      // CUDA: time cuBLASLt's algorithms per GEMM shape at startup
  std::string kernels = "auto";           // the GPU's kernels: "auto" (kernels/heuristics.h) or "portable"
  std::string target_attention = "auto";  // the target's attention on CUDA: "auto", "cudnn" or "own"
  // Several processes (torchrun / srun; docs/USER_GUIDE.md, "Many GPUs, many nodes"):
  int64_t rendezvous_port = 0;          // 0: MASTER_PORT + 1
  double rendezvous_timeout_s = 300;    // every rank must arrive within this
  double heartbeat_timeout_s = 30;      // a rank silent this long counts as hung
  bool shard_optimizer = false;         // ZeRO-1: f32 masters and Adam moments split across ranks
  bool overlap_reduction = false;       // reduce gradient buckets during the backward (CUDA)
  std::string reduce_dtype = "f32";     // the overlapped reduction's dtype: "f32" or "bf16"
};

struct CheckpointConfig {
  int64_t every = 0;  // optimizer steps; 0: only at the end and on SIGINT/SIGTERM
  int64_t keep = 3;   // newest complete checkpoints kept
  bool resume = true; // resume from the newest complete checkpoint in <dump_folder>/checkpoints
};

struct MetricsConfig {
  int64_t log_every = 10;  // optimizer steps between log lines (and metrics.jsonl records)
  bool progress = true;    // a live progress line on a terminal
  // Experiment trackers fed from metrics.jsonl by `dflash-data track` (train/trackers.h):
  std::vector<std::string> trackers;  // "tensorboard", "wandb"; empty: none
  std::string run_name;               // the tracker run's name; empty: W&B's own (WANDB_NAME, else random)
  std::string wandb_project;          // empty: WANDB_PROJECT, else W&B's default
  std::string wandb_entity;           // empty: WANDB_ENTITY, else the account's default
  std::string wandb_mode;             // "online", "offline"; empty: WANDB_MODE, else online
};

struct Config {
  std::filesystem::path source;  // the file it came from, for messages
  JobConfig job;
  TargetConfig target;
  DrafterConfig drafter;
  DataConfig data;
  std::vector<Bucket> buckets;
  TrainingConfig training;
  EvalConfig eval;
  GenerateConfig generate;
  RuntimeConfig runtime;
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
};

// Reads and validates a config file, then applies overrides ("section.key=value", the value in
// TOML syntax or a bare string). Relative paths are taken relative to the current directory.
Config load_config(const std::filesystem::path& path, const std::vector<std::string>& overrides = {});
Config parse_config(const std::string& toml_text, const std::filesystem::path& source,
                    const std::vector<std::string>& overrides = {});

// Every key parse_config accepts, as dotted names ("training.lr", "buckets.seq"), for docs and tests.
std::vector<std::string> config_keys();

}  // namespace dflash

// A small synthetic DFlash job in a temporary folder for the trainer tests: a random Qwen3
// target and data generated from it (made once and shared), and per-test dump folders.
#pragma once
#include <filesystem>
#include <fstream>
#include <unistd.h>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "tests/test_util.h"
#include "train/config.h"

namespace dflash::test {

// A temporary folder for this test process, removed at exit.
inline std::filesystem::path trainer_root() {
  struct Root {
    std::filesystem::path path;
    Root() : path(std::filesystem::temp_directory_path() / ("dflash-trainer-tests-" + std::to_string(::getpid()))) {
      std::filesystem::remove_all(path);
      std::filesystem::create_directories(path);
    }
    ~Root() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static Root root;
  return root.path;
}

// The job's TOML with paths under the shared root; `dump` names the test's own dump folder.
inline std::string small_job_toml(const std::string& dump, int64_t steps = 20) {
  std::string r = trainer_root().string();
  return R"(
[job]
name = "test"
dump_folder = ")" + r + "/" + dump + R"("
seed = 3
[target]
path = ")" + r + R"(/target"
[target.synthetic]
vocab_size = 64
hidden_size = 32
intermediate_size = 64
num_hidden_layers = 3
num_attention_heads = 2
num_key_value_heads = 1
head_dim = 16
init_std = 0.2
[drafter]
num_hidden_layers = 2
block_size = 4
mask_token_id = 63
loss_decay_gamma = 4.0
[data]
train = ")" + r + R"(/data/train.jsonl"
eval = ")" + r + R"(/data/eval.jsonl"
[data.synthetic]
train_sequences = 48
eval_sequences = 8
prompt_length = 4
min_length = 10
max_length = 30
[[buckets]]
seq = 16
anchors = 2
batch = 3
[[buckets]]
seq = 32
anchors = 4
batch = 2
[training]
steps = )" + std::to_string(steps) + R"(
lr = 3e-3
grad_accum = 2
[runtime]
devices = "cpu"
cpu_workers = 2
[checkpoint]
every = 0
[metrics]
log_every = 1
progress = false
)";
}

inline Config small_job(const std::string& dump, const std::vector<std::string>& overrides = {}, int64_t steps = 20) {
  return parse_config(small_job_toml(dump, steps), trainer_root() / (dump + ".toml"), overrides);
}

// The training-step records (those with a "step" key and no "eval" key) of a dump folder.
inline std::vector<nlohmann::json> step_records(const std::filesystem::path& dump) {
  std::ifstream in(dump / "metrics.jsonl");
  std::vector<nlohmann::json> out;
  std::string line;
  while (std::getline(in, line)) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j.contains("step") && !j.contains("eval")) out.push_back(j);
  }
  return out;
}

inline std::vector<double> losses(const std::vector<nlohmann::json>& records) {
  std::vector<double> v;
  for (const auto& r : records) v.push_back(r.at("loss").get<double>());
  return v;
}

}  // namespace dflash::test

// Shared by the target tests: a scratch directory, small random targets, and edits of their
// config.json and weights (read and written with the project's safetensors code, which has its
// own golden tests) to craft broken checkpoints.
#pragma once
#include <unistd.h>

#include <atomic>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <random>

#include "model/target.h"
#include "runtime/safetensors.h"
#include "tests/test_util.h"

// Checks that expr throws dflash::Error whose message contains text.
#define CHECK_ERROR(expr, text) CHECK_THROWS_WITH_AS(expr, doctest::Contains(std::string(text).c_str()), dflash::Error)

namespace dflash::test {

namespace fs = std::filesystem;
using json = nlohmann::json;


inline SyntheticTargetConfig small_config(const std::string& arch) {
  SyntheticTargetConfig c;
  c.architecture = arch;
  c.vocab_size = 48;
  c.hidden_size = 32;
  c.intermediate_size = 48;
  c.num_hidden_layers = 3;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 8;
  c.init_std = 0.2;
  c.seed = 11;
  return c;
}

// A fresh small random target in tmp/name.
inline fs::path make_target(const TempDir& tmp, const std::string& name, const std::string& arch = "qwen3") {
  fs::path dir = tmp / name;
  write_random_target(dir, small_config(arch));
  return dir;
}

inline void edit_config(const fs::path& dir, const std::function<void(json&)>& edit) {
  json j = json::parse(std::ifstream(dir / "config.json"));
  edit(j);
  std::ofstream(dir / "config.json", std::ios::trunc) << j.dump(2);
}

inline void write_text(const fs::path& p, const std::string& text) { std::ofstream(p, std::ios::trunc) << text; }

struct HostTensor {
  std::vector<int64_t> shape;
  std::vector<float> values;
};
using HostWeights = std::map<std::string, HostTensor>;

inline HostWeights read_weights(const fs::path& file) {
  SafeTensors st(file);
  HostWeights w;
  for (const std::string& name : st.names()) w[name] = {st.info(name).shape, st.read_floats(name)};
  return w;
}

inline void write_weights(const fs::path& file, const HostWeights& w) {
  std::vector<SafeTensorsEntry> entries;
  for (const auto& [name, t] : w) entries.push_back({name, "F32", t.shape, t.values.data()});
  write_safetensors(file, entries);
}

inline void edit_weights(const fs::path& dir, const std::function<void(HostWeights&)>& edit) {
  HostWeights w = read_weights(dir / "model.safetensors");
  edit(w);
  write_weights(dir / "model.safetensors", w);
}

// Splits dir's model.safetensors into two shards and an index (tensors alternate between them).
inline void shard(const fs::path& dir) {
  HostWeights w = read_weights(dir / "model.safetensors"), a, b;
  json index = {{"metadata", json::object()}, {"weight_map", json::object()}};
  int i = 0;
  for (auto& [name, t] : w) {
    bool first = i++ % 2 == 0;
    (first ? a : b)[name] = t;
    index["weight_map"][name] = first ? "model-00001-of-00002.safetensors" : "model-00002-of-00002.safetensors";
  }
  write_weights(dir / "model-00001-of-00002.safetensors", a);
  write_weights(dir / "model-00002-of-00002.safetensors", b);
  write_text(dir / "model.safetensors.index.json", index.dump(2));
  fs::remove(dir / "model.safetensors");
}

inline std::vector<int32_t> random_ids(size_t n, int32_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = int32_t(rng() % uint64_t(vocab));
  return v;
}

}  // namespace dflash::test

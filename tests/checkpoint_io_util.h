// Helpers shared by the checkpoint-io tests (test_checkpoint_io.cpp, test_export_io.cpp): temp
// directories, raw file access independent of the code under test, small and golden drafter specs, and
// a trained store/optimizer pair with a bitwise snapshot of everything a checkpoint restores.
#pragma once
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/checksum.h"
#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "tests/test_util.h"
#include "train/checkpoint.h"
#include "train/export.h"

namespace dflash::test::ckpt {

namespace fs = std::filesystem;


inline std::vector<std::string> listing(const fs::path& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir)) out.push_back(e.path().filename().string());
  std::sort(out.begin(), out.end());
  return out;
}

// Written with plain iostreams, independent of the code under test.
inline void write_raw(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

inline std::string read_raw(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// The textbook bit-at-a-time CRC-32 (reflected, polynomial 0xedb88320).
inline uint32_t reference_crc32(const uint8_t* p, size_t n) {
  uint32_t c = 0xffffffffu;
  for (size_t i = 0; i < n; ++i) {
    c ^= p[i];
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0xedb88320u & (0u - (c & 1u)));
  }
  return ~c;
}

inline DrafterSpec small_spec() {
  DrafterSpec s;
  s.hidden_size = 8;
  s.intermediate_size = 16;
  s.num_hidden_layers = 2;
  s.num_attention_heads = 2;
  s.num_key_value_heads = 1;
  s.head_dim = 4;
  s.vocab_size = 32;
  s.max_position_embeddings = 64;
  s.block_size = 4;
  s.mask_token_id = 31;
  s.target_layer_ids = {1, 2};
  s.num_target_layers = 4;
  return s;
}

inline DrafterSpec golden_spec() {
  DrafterSpec s = golden_drafter_spec();
  s.loss_decay_gamma = 0;  // not exported
  return s;
}

// A store with random values and an optimizer that has taken `steps` updates with random grads.
struct Trained {
  ParameterStore params;
  AdamWOptimizer opt;
  Tensor stats = Tensor::persistent({2}, DType::f32);
  uint64_t seed;

  Trained(const DrafterSpec& spec, uint64_t seed_, int steps)
      : params(drafter_param_specs(spec)), opt(params, OptimizerConfig{}), seed(seed_) {
    for (const ParamSpec& p : params.specs()) {
      std::vector<float> v = random_floats(size_t(p.shape.numel()), seed++, 0.5f);
      params.master(p.name).copy_from_host(v.data(), v.size() * 4);
    }
    for (int s = 0; s < steps; ++s) step();
  }
  void step() {
    for (const ParamSpec& p : params.specs()) {
      std::vector<float> g = random_floats(size_t(p.shape.numel()), seed++, 0.1f);
      params.grad(p.name).copy_from_host(g.data(), g.size() * 4);
    }
    opt.update(1.0f, stats);
  }
  int64_t steps_done() const { return opt.step_counter().to_ints()[0]; }
};

// Everything a checkpoint must restore, as the flat buffers hold it (padding included).
struct Snapshot {
  std::vector<float> master, m, v;
  std::vector<int32_t> step;
  explicit Snapshot(const Trained& t)
      : master(t.params.flat_master().to_floats()),
        m(t.opt.adam_m().to_floats()),
        v(t.opt.adam_v().to_floats()),
        step(t.opt.step_counter().to_ints()) {}
};

inline void check_same(const Snapshot& a, const Snapshot& b) {
  CHECK(bitwise_equal(a.master, b.master));
  CHECK(bitwise_equal(a.m, b.m));
  CHECK(bitwise_equal(a.v, b.v));
  CHECK(a.step == b.step);
}

// Rewrites a checkpoint's COMPLETE.json from its files as they are now (sizes and CRC-32 computed
// here, independently), after `edit` changed the marker's other fields.
inline void reseal(const fs::path& dir, const std::function<void(nlohmann::json&)>& edit = {}) {
  nlohmann::json m = nlohmann::json::parse(read_raw(dir / "COMPLETE.json"));
  for (nlohmann::json& f : m["files"]) {
    const std::string bytes = read_raw(dir / f["name"].get<std::string>());
    char hex[9];
    std::snprintf(hex, sizeof hex, "%08x", reference_crc32(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size()));
    f["bytes"] = bytes.size();
    f["crc32"] = hex;
  }
  if (edit) edit(m);
  write_raw(dir / "COMPLETE.json", m.dump());
}

inline void copy_golden_as_export(const fs::path& dir) {
  fs::create_directories(dir);
  fs::copy_file(golden_dir() / "drafter_config.json", dir / "config.json");
  fs::copy_file(golden_dir() / "drafter_init.safetensors", dir / "model.safetensors");
}

}  // namespace dflash::test::ckpt

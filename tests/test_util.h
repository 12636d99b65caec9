// Test helpers: a CPU runtime fixture, seeded random tensors, finite-difference gradient checks
// and tensor comparisons in the golden data's metric (max |a-b| <= tol * max |b|).
#pragma once
#include <doctest/doctest.h>

#include <atomic>
#include <cmath>
#include <sys/wait.h>
#include <unistd.h>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "model/drafter_spec.h"
#include "runtime/autograd.h"
#include "runtime/context.h"
#include "runtime/ops.h"
#include "runtime/tensor.h"

namespace dflash::test {

// Environment variable `name` set to `value` for the object's lifetime, then unset.
struct ScopedEnv {
  ScopedEnv(const char* name, const char* value) : name_(name) { setenv(name, value, 1); }
  ~ScopedEnv() { unsetenv(name_.c_str()); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  std::string name_;
};

// A CPU context made current for the test's lifetime.
struct CpuRuntime {
  Context ctx{Device::cpu()};
  ContextScope scope{ctx};
};

inline std::vector<float> random_floats(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(rng);
  return v;
}

// A persistent f32 tensor with N(0, scale^2) entries.
inline Tensor randn(const Shape& shape, uint64_t seed, float scale = 1.0f, const std::string& name = "") {
  return Tensor::from_floats(shape, random_floats(size_t(shape.numel()), seed, scale), name);
}

// A trainable leaf with N(0, scale^2) entries and a zeroed gradient buffer.
inline Tensor param(const Shape& shape, uint64_t seed, float scale = 1.0f, const std::string& name = "") {
  Tensor t = randn(shape, seed, scale, name);
  t.set_requires_grad(true);
  return t;
}

inline double max_abs(const std::vector<float>& v) {
  double m = 0;
  for (float x : v) m = std::max(m, double(std::fabs(x)));
  return m;
}

// max |a - b| / max |b| (0 when both are 0); NaN anywhere gives infinity.
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double num = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (!std::isfinite(a[i]) || !std::isfinite(b[i])) return INFINITY;
    num = std::max(num, double(std::fabs(a[i] - b[i])));
  }
  double den = max_abs(b);
  return den == 0 ? num : num / den;
}

inline bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct GradCheck {
  double h = 1e-2;      // central-difference step
  double tol = 3e-3;    // |fd - analytic| <= tol * max(1, max |analytic|)
  int samples = 24;     // coordinates checked per input (all when the input is smaller)
  uint64_t seed = 1234;
};

// Checks the gradients backward accumulates into each input (trainable CPU leaves) against
// central finite differences of sum(r * f()) for a fixed random r.
inline void check_gradients(const std::function<Tensor()>& f, const std::vector<Tensor>& inputs,
                            GradCheck opt = {}) {
  for (const Tensor& x : inputs) {
    REQUIRE(x.requires_grad());
    std::vector<float> zero(size_t(x.numel()), 0.0f);
    x.grad().copy_from_host(zero.data(), zero.size() * 4);
  }
  Tensor y = f();
  REQUIRE(y.requires_grad());
  std::vector<float> r = random_floats(size_t(y.numel()), opt.seed + 7);
  Tensor rt = Tensor::from_floats(y.shape(), r);
  run_backward({y}, {rt});
  auto project = [&] {
    NoGrad ng;
    std::vector<float> out = f().to_floats();
    double s = 0;
    for (size_t i = 0; i < out.size(); ++i) s += double(out[i]) * r[i];
    return s;
  };
  std::mt19937_64 rng(opt.seed);
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    std::vector<float> an = x.grad().to_floats();
    double scale = std::max(1.0, max_abs(an));
    float* p = x.data<float>();
    int64_t n = x.numel();
    int count = int(std::min<int64_t>(n, opt.samples));
    for (int s = 0; s < count; ++s) {
      int64_t i = n <= opt.samples ? s : int64_t(rng() % uint64_t(n));
      float orig = p[i];
      p[i] = float(orig + opt.h);
      double plus = project();
      p[i] = float(orig - opt.h);
      double minus = project();
      p[i] = orig;
      double fd = (plus - minus) / (2 * opt.h);
      INFO("input " << k << " " << x.describe() << " index " << i << ": finite difference " << fd
                    << ", backward " << an[size_t(i)]);
      CHECK(std::fabs(fd - an[size_t(i)]) <= opt.tol * scale);
    }
  }
}

// A fresh folder under the system temp dir, removed with its contents (permissions restored
// first) when the test ends.
struct TempDir {
  std::filesystem::path path;
  explicit TempDir(const std::string& tag = "tmp") {
    static std::atomic<int> counter{0};
    path = std::filesystem::temp_directory_path() /
           ("dflash-" + tag + "-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::filesystem::remove_all(path);
    std::filesystem::create_directories(path);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::permissions(path, std::filesystem::perms::owner_all, std::filesystem::perm_options::add, ec);
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::filesystem::path operator/(const std::string& name) const { return path / name; }
  // The names of the folder's entries, sorted.
  std::vector<std::string> listing() const {
    std::vector<std::string> out;
    for (const auto& e : std::filesystem::directory_iterator(path)) out.push_back(e.path().filename().string());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// The golden drafter's dims (tests/golden/dflash-tiny/README.md); loss_decay_gamma 4.
inline DrafterSpec golden_drafter_spec() {
  DrafterSpec s;
  s.hidden_size = 64;
  s.intermediate_size = 128;
  s.num_hidden_layers = 2;
  s.num_attention_heads = 4;
  s.num_key_value_heads = 2;
  s.head_dim = 16;
  s.vocab_size = 320;
  s.rms_norm_eps = 1e-6;
  s.rope_theta = 10000.0;
  s.max_position_embeddings = 256;
  s.block_size = 4;
  s.mask_token_id = 319;
  s.target_layer_ids = {1, 2};
  s.num_target_layers = 4;
  s.loss_decay_gamma = 4.0;
  return s;
}

// The golden reference folders, copied into the repository (tests/golden/README.md).
// golden_dir(): $DFLASH_GOLDEN when set, else tests/golden/dflash-tiny.
inline std::filesystem::path golden_dir() {
  if (const char* env = std::getenv("DFLASH_GOLDEN")) return env;
  std::filesystem::path p = DFLASH_SOURCE_DIR "/tests/golden/dflash-tiny";
  if (!std::filesystem::exists(p / "case.json"))
    FAIL("golden data not found at " << p.string() << ": set DFLASH_GOLDEN or restore tests/golden from git");
  return p;
}

// tests/golden/dflash-spec: greedy speculative decoding, computed in float64.
inline std::filesystem::path golden_spec_dir() {
  std::filesystem::path p = DFLASH_SOURCE_DIR "/tests/golden/dflash-spec";
  if (!std::filesystem::exists(p / "expected.json"))
    FAIL("golden data not found at " << p.string() << ": restore tests/golden from git");
  return p;
}

// A shell command, run with its stderr joined to its stdout: pclose's status (WEXITSTATUS reads the
// exit code) and everything it printed.
struct CommandOutput {
  int status = -1;
  std::string text;
};
inline CommandOutput run_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  REQUIRE_MESSAGE(p, "cannot run " << cmd);
  CommandOutput o;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) o.text.append(buf, n);
  o.status = pclose(p);
  return o;
}
// The command's exit code, or -1 when a signal ended it.
inline int exit_code(const CommandOutput& o) { return WIFEXITED(o.status) ? WEXITSTATUS(o.status) : -1; }

// This test binary, and a program built beside it (dflash-bench, dflash-train).
inline std::string self_binary() { return std::filesystem::read_symlink("/proc/self/exe").string(); }
inline std::string sibling_binary(const char* name) {
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

}  // namespace dflash::test

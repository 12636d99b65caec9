// AdamW, gradient norm, clipping and the lr schedule against an independent double-precision
// implementation written here, and one step against the golden after_adamw.* values; the parameter
// store's views and the ranks' slices of its flat buffers.
#include <cmath>

#include "runtime/optimizer.h"
#include "runtime/safetensors.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {
// The textbook formulas, in double.
struct ReferenceAdamW {
  OptimizerConfig c;
  std::vector<double> p{}, m{}, v{};
  int64_t t = 0;
  double last_norm = 0, last_lr = 0;

  double lr_at(int64_t step) const {
    if (c.total_steps <= 0) return c.lr;
    if (step < c.warmup_steps) return double(c.lr) * double(step + 1) / double(c.warmup_steps);
    double progress = std::min(1.0, double(step - c.warmup_steps) / double(c.total_steps - 1 - c.warmup_steps));
    double lo = double(c.lr) * c.min_lr_ratio;
    return lo + (double(c.lr) - lo) * 0.5 * (1 + std::cos(M_PI * progress));
  }

  void step(std::vector<double> g, double scale) {
    double ss = 0;
    for (double& x : g) {
      x *= scale;
      ss += x * x;
    }
    last_norm = std::sqrt(ss);
    if (c.max_grad_norm > 0 && last_norm + 1e-6 > c.max_grad_norm)
      for (double& x : g) x *= c.max_grad_norm / (last_norm + 1e-6);
    double lr = lr_at(t);
    last_lr = lr;
    ++t;
    for (size_t i = 0; i < p.size(); ++i) {
      p[i] -= lr * c.weight_decay * p[i];
      m[i] = c.beta1 * m[i] + (1 - c.beta1) * g[i];
      v[i] = c.beta2 * v[i] + (1 - c.beta2) * g[i] * g[i];
      double mh = m[i] / (1 - std::pow(double(c.beta1), double(t)));
      double vh = v[i] / (1 - std::pow(double(c.beta2), double(t)));
      p[i] -= lr * mh / (std::sqrt(vh) + c.eps);
    }
  }
};

// The real (unpadded) elements of a store's flat buffer, parameter by parameter.
std::vector<float> unpadded(const ParameterStore& s, const Tensor& flat) {
  std::vector<float> all = flat.to_floats(), out;
  for (const ParamSpec& p : s.specs()) {
    size_t off = size_t((static_cast<char*>(s.master(p.name).raw()) - static_cast<char*>(s.flat_master().raw())) / 4);
    out.insert(out.end(), all.begin() + long(off), all.begin() + long(off + size_t(p.shape.numel())));
  }
  return out;
}
}  // namespace

TEST_SUITE("optimizer") {
  TEST_CASE("AdamW over 12 steps with changing gradients matches the double-precision formula") {
    CpuRuntime rt;
    for (float max_norm : {0.0f, 0.05f}) {
      ParameterStore store({{"a", {3, 5}}, {"b", {7}}, {"c", {2, 2, 3}}});
      OptimizerConfig c;
      c.lr = 1e-2f;
      c.weight_decay = 0.05f;
      c.max_grad_norm = max_norm;
      c.warmup_steps = 3;
      c.total_steps = 12;
      c.min_lr_ratio = 0.1f;
      AdamWOptimizer opt(store, c);
      ReferenceAdamW ref{c};
      for (const ParamSpec& p : store.specs()) {
        std::vector<float> v = random_floats(size_t(p.shape.numel()), std::hash<std::string>{}(p.name) % 1000);
        store.master(p.name).copy_from_host(v.data(), v.size() * 4);
      }
      for (float x : unpadded(store, store.flat_master())) ref.p.push_back(x);
      ref.m.assign(ref.p.size(), 0);
      ref.v.assign(ref.p.size(), 0);
      Tensor stats = Tensor::persistent({2}, DType::f32);
      for (int step = 0; step < 12; ++step) {
        std::vector<double> g;
        for (const ParamSpec& p : store.specs()) {
          std::vector<float> gv = random_floats(size_t(p.shape.numel()), uint64_t(100 + step * 7 + p.name[0]), 0.1f);
          store.grad(p.name).copy_from_host(gv.data(), gv.size() * 4);
          g.insert(g.end(), gv.begin(), gv.end());
        }
        opt.update(0.5f, stats);
        ref.step(g, 0.5);
        std::vector<float> s = stats.to_floats();
        CHECK(s[0] == doctest::Approx(ref.last_norm).epsilon(1e-5));
        CHECK(s[1] == doctest::Approx(ref.last_lr).epsilon(1e-6));
        std::vector<float> got = unpadded(store, store.flat_master());
        std::vector<float> want(ref.p.begin(), ref.p.end());
        CHECK(rel_err(got, want) < 1e-5);
        // Gradients are zeroed for the next accumulation; padding stays 0.
        for (float x : store.flat_grads().to_floats()) REQUIRE(x == 0.0f);
      }
      CHECK(opt.step_counter().to_ints()[0] == 12);
      if (max_norm > 0) CHECK(ref.last_norm > max_norm);  // clipping was active
    }
  }

  TEST_CASE("set_zero_grads(false): the same update, and the gradients are left for the next backward to overwrite") {
    CpuRuntime rt;
    std::vector<ParamSpec> specs = {{"a", Shape{7, 3}}, {"b", Shape{5}}};
    ParameterStore zeroing(specs), keeping(specs);
    OptimizerConfig c;
    c.max_grad_norm = 0.0f;  // no clip: the CPU update then only scales the gradients in place
    AdamWOptimizer z(zeroing, c), k(keeping, c);
    k.set_zero_grads(false);
    CHECK(z.zero_grads());
    CHECK_FALSE(k.zero_grads());
    for (ParameterStore* s : {&zeroing, &keeping})
      for (const ParamSpec& p : specs) {
        std::vector<float> v = random_floats(size_t(p.shape.numel()), 11), g = random_floats(v.size(), 12);
        s->master(p.name).copy_from_host(v.data(), v.size() * 4);
        s->grad(p.name).copy_from_host(g.data(), g.size() * 4);
      }
    const std::vector<float> before = keeping.flat_grads().to_floats();
    Tensor stats = Tensor::persistent({2}, DType::f32);
    z.update(1.0f, stats);
    k.update(1.0f, stats);
    CHECK(bitwise_equal(zeroing.flat_master().to_floats(), keeping.flat_master().to_floats()));
    for (float x : zeroing.flat_grads().to_floats()) REQUIRE(x == 0.0f);
    CHECK(bitwise_equal(keeping.flat_grads().to_floats(), before));  // grad_scale 1: unchanged
  }

  TEST_CASE("one AdamW step reproduces the golden after_adamw values") {
    CpuRuntime rt;
    SafeTensors init(golden_dir() / "drafter_init.safetensors");
    SafeTensors expected(golden_dir() / "expected.safetensors");
    std::vector<ParamSpec> specs;
    for (const std::string& name : init.names()) specs.push_back({name, Shape::of(init.info(name).shape)});
    ParameterStore store(specs);
    for (const ParamSpec& p : specs) {
      std::vector<float> v = init.read_floats(p.name), g = expected.read_floats("grad." + p.name);
      store.master(p.name).copy_from_host(v.data(), v.size() * 4);
      store.grad(p.name).copy_from_host(g.data(), g.size() * 4);
    }
    OptimizerConfig c;  // the golden settings: constant lr, no clipping, wd 0.1 on every parameter
    c.lr = 1e-3f;
    c.beta1 = 0.9f;
    c.beta2 = 0.95f;
    c.eps = 1e-8f;
    c.weight_decay = 0.1f;
    c.max_grad_norm = 0.0f;
    AdamWOptimizer opt(store, c);
    Tensor stats = Tensor::persistent({2}, DType::f32);
    opt.update(1.0f, stats);
    CHECK(stats.to_floats()[0] == doctest::Approx(2.5).epsilon(0.1));  // "global norm about 2.5"
    for (const ParamSpec& p : specs) {
      INFO("parameter " << p.name);
      CHECK(rel_err(store.master(p.name).to_floats(), expected.read_floats("after_adamw." + p.name)) < 1e-4);
    }
  }

  TEST_CASE("parameter store: aligned views, clear errors") {
    CpuRuntime rt;
    ParameterStore store({{"x", {3}}, {"y", {5, 2}}});
    CHECK(reinterpret_cast<uintptr_t>(store.get("y").raw()) % 64 == 0);
    CHECK(store.parameter_count() == 13);
    CHECK(store.get("y").grad().raw() == store.grad("y").raw());
    CHECK_THROWS_WITH_AS(store.get("z"), doctest::Contains("no parameter named 'z'"), Error);
    CHECK_THROWS_WITH_AS(ParameterStore({{"x", {3}}, {"x", {2}}}), doctest::Contains("'x' declared twice"), Error);
  }

  TEST_CASE("parameter store: three ranks split the padded flat buffers into equal aligned slices") {
    CpuRuntime rt;
    // 20 floats take 32 (64-byte alignment, 16 floats); three aligned slices of 16 make 48.
    ParameterStore three({{"a", Shape{20}}}, ShardLayout{3, 1, true});
    CHECK(three.padded_numel() == 48);
    CHECK(three.shard_numel() == 16);
    CHECK(three.shard_begin() == 16);
    CHECK(three.flat_master().numel() == 16);
    CHECK(ParameterStore({{"a", Shape{20}}}).padded_numel() == 32);
    CHECK(ParameterStore({{"a", Shape{20}}}, ShardLayout{2, 0, false}).padded_numel() == 32);
  }
}

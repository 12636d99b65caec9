// The backward hook the overlapped gradient reduction hangs on: it runs once the layers recorded
// after it are done (their parameters' gradients complete), before the layers below, and hands
// the gradient on unchanged (the gradients equal those without the hook, bit for bit); then the
// drafter's hook points and the overlap's buckets built on it (layers 10 and up included).
#include "graphs/overlap.h"
#include "model/drafter.h"
#include "runtime/safetensors.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("autograd") {
  TEST_CASE("grad_hook runs between the backward of the layer after it and the layer before it") {
    CpuRuntime rt;
    Tensor w1 = param({4, 3}, 1), w2 = param({5, 4}, 2);
    Tensor x = randn({6, 3}, 3);
    auto run = [&](bool hook) {
      std::vector<float> at_hook_w1, at_hook_w2;
      int calls = 0;
      Tensor h = ops::linear(x, w1);
      if (hook)
        h = grad_hook(h, [&] {
          ++calls;
          at_hook_w1 = w1.grad().to_floats();
          at_hook_w2 = w2.grad().to_floats();
        });
      backward(ops::sum(ops::linear(ops::swiglu(h, h), w2)));
      if (hook) {
        CHECK(calls == 1);
        CHECK(max_abs(at_hook_w1) == 0.0);  // the layer before it has not run yet
        CHECK(at_hook_w2 == w2.grad().to_floats());  // the layer after it is complete
      }
      std::vector<float> g = w1.grad().to_floats(), g2 = w2.grad().to_floats();
      g.insert(g.end(), g2.begin(), g2.end());
      ops::fill_(w1.grad(), 0.0f);
      ops::fill_(w2.grad(), 0.0f);
      return g;
    };
    std::vector<float> plain = run(false), hooked = run(true);
    CHECK(max_abs(plain) > 0);
    CHECK(bitwise_equal(plain, hooked));
  }

  TEST_CASE("grad_hook on a tensor that needs no gradient records nothing") {
    CpuRuntime rt;
    Tensor x = randn({2, 2}, 1);
    size_t before = rt.ctx.tape().size();
    bool called = false;
    Tensor y = grad_hook(x, [&] { called = true; });
    CHECK(y.id() == x.id());
    CHECK(rt.ctx.tape().size() == before);
    CHECK_FALSE(called);
  }
}

// The drafter's two hook points and the overlap's buckets: when the hook says (l, mlp) or
// (l, all), every gradient of that bucket has its final value (a reduction started then sees what
// the update will), and the half layers below have not been touched yet; the buckets and the rest
// split the flat buffer exactly.
namespace {

// Which flat ranges hold each parameter: index into `ranges`, or -1 when none or several do.
int owner_of(const ParameterStore& p, const ParamSpec& s, const std::vector<FlatRange>& ranges) {
  const int64_t b = p.offset_of(s.name), e = b + s.shape.numel();
  int owner = -1, count = 0;
  for (size_t i = 0; i < ranges.size(); ++i)
    if (b >= ranges[i].first && e <= ranges[i].second) owner = int(i), ++count;
  return count == 1 ? owner : -1;
}

bool in_mlp_half(const std::string& name) {
  return name.find(".mlp.") != std::string::npos || name.find(".post_attention_layernorm.") != std::string::npos;
}

std::vector<float> slice(const std::vector<float>& v, FlatRange r) {
  return {v.begin() + r.first, v.begin() + r.second};
}

DrafterSpec three_layer_spec() {
  DrafterSpec s = golden_drafter_spec();
  s.num_hidden_layers = 3;
  return s;
}

}  // namespace

TEST_SUITE("autograd") {
  TEST_CASE("the overlap's buckets are the drafter's half layers; with the rest they split the flat buffer") {
    CpuRuntime rt;
    const DrafterSpec s = three_layer_spec();
    const int64_t L = s.num_hidden_layers;
    for (int world : {1, 2}) {
      CAPTURE(world);
      ParameterStore p(drafter_param_specs(s), ShardLayout{world, 0, false});
      const ReductionPlan plan = reduction_plan_of(p, L);
      REQUIRE(int64_t(plan.mlp.size()) == L);
      REQUIRE(int64_t(plan.attention.size()) == L);
      CHECK(plan.attention[0] == FlatRange{0, 0});  // layer 0's attention half is complete only at the end
      std::vector<FlatRange> all = plan.rest;
      for (int64_t l = 0; l < L; ++l) {
        all.push_back(plan.mlp[size_t(l)]);
        if (l >= 1) all.push_back(plan.attention[size_t(l)]);
      }
      // Disjoint and covering [0, padded): sorted, each begins where the previous ends.
      std::sort(all.begin(), all.end());
      int64_t at = 0;
      for (const FlatRange& r : all) {
        CHECK(r.first == at);
        CHECK(r.second > r.first);
        at = r.second;
      }
      CHECK(at == p.padded_numel());
      for (const ParamSpec& q : p.specs()) {
        CAPTURE(q.name);
        const bool layer = q.name.rfind("layers.", 0) == 0;
        const int64_t l = layer ? std::stoll(q.name.substr(7)) : -1;
        const int in_rest = owner_of(p, q, plan.rest);
        if (layer && in_mlp_half(q.name)) {
          CHECK(owner_of(p, q, plan.mlp) == int(l));
          CHECK(in_rest == -1);
        } else if (layer && l >= 1) {
          CHECK(owner_of(p, q, plan.attention) == int(l));
          CHECK(in_rest == -1);
        } else {
          CHECK(in_rest >= 0);  // layer 0's attention half, fc, hidden_norm, norm
          CHECK(owner_of(p, q, plan.mlp) == -1);
        }
      }
    }
    // A bucket may hold only its own half: interleaved halves are refused, naming the parameter.
    ParameterStore mixed({{"layers.0.mlp.up_proj.weight", {4, 4}},
                          {"layers.0.self_attn.q_proj.weight", {4, 4}},
                          {"layers.0.mlp.down_proj.weight", {4, 4}}});
    CHECK_THROWS_WITH_AS(reduction_plan_of(mixed, 1),
                         doctest::Contains("'layers.0.self_attn.q_proj.weight' lies inside layer 0's MLP bucket"), Error);
  }

  TEST_CASE("the drafter's hook runs when a half layer's gradients are final, before the layers below") {
    CpuRuntime rt;
    const DrafterSpec s = three_layer_spec();
    const int64_t L = s.num_hidden_layers;
    SafeTensors target(golden_dir() / "target-qwen3" / "model.safetensors");
    SafeTensors batch(golden_dir() / "batch.safetensors");
    const DrafterInputs in{batch.load("input_ids", DType::i32), batch.load("loss_mask", DType::i32),
                           batch.load("anchors", DType::i32), batch.load("keep", DType::i32),
                           batch.load("target_hidden", DType::f32)};
    auto run = [&](Recompute r, bool hooked) {
      Drafter d(s, target.load("model.embed_tokens.weight", DType::f32), target.load("lm_head.weight", DType::f32));
      const ReductionPlan plan = reduction_plan_of(d.params(), L);
      std::vector<std::pair<int64_t, LayerGrads>> calls;
      std::vector<std::vector<float>> seen;
      if (hooked)
        d.set_layer_backward_hook([&](int64_t l, LayerGrads done) {
          calls.push_back({l, done});
          seen.push_back(d.params().flat_grads().to_floats());
        });
      ops::fill_(d.params().flat_grads(), 0.0f);
      backward(d.forward(in, r, 16).loss);
      const std::vector<float> final_grads = d.params().flat_grads().to_floats();
      if (!hooked) return final_grads;
      // Top layer first; each layer's MLP half, then (l >= 1) the whole layer.
      std::vector<std::pair<int64_t, LayerGrads>> want;
      for (int64_t l = L - 1; l >= 0; --l) {
        want.push_back({l, LayerGrads::mlp});
        if (l >= 1) want.push_back({l, LayerGrads::all});
      }
      REQUIRE(calls == want);
      for (size_t i = 0; i < calls.size(); ++i) {
        const auto [l, done] = calls[i];
        CAPTURE(l);
        CAPTURE(done == LayerGrads::mlp);
        const FlatRange mine = done == LayerGrads::mlp ? plan.mlp[size_t(l)] : plan.attention[size_t(l)];
        CHECK(max_abs(slice(final_grads, mine)) > 0);
        CHECK(bitwise_equal(slice(seen[i], mine), slice(final_grads, mine)));  // final when reduced
        // Not yet started: this layer's attention half (at its MLP point) and every half below.
        const std::string layer = "layers." + std::to_string(l) + ".";
        const FlatRange attention_half{d.params().offset_of(layer + "input_layernorm.weight"),
                                       d.params().offset_of(layer + "post_attention_layernorm.weight")};
        if (done == LayerGrads::mlp) CHECK(max_abs(slice(seen[i], attention_half)) == 0.0);
        if (l >= 1) CHECK(max_abs(slice(seen[i], plan.mlp[size_t(l - 1)])) == 0.0);
      }
      return final_grads;
    };
    for (Recompute r : {Recompute{}, Recompute{L, 0}, Recompute{1, 1}}) {
      CAPTURE(r.full);
      CAPTURE(r.partial);
      CHECK(bitwise_equal(run(r, true), run(r, false)));
    }
  }

  TEST_CASE("overlap: layers 10 and up get their own buckets") {
    CpuRuntime rt;
    std::vector<ParamSpec> specs;
    for (int l = 0; l < 12; ++l)
      for (const char* w : {"self_attn.q_proj.weight", "mlp.up_proj.weight"})
        specs.push_back({"layers." + std::to_string(l) + "." + w, Shape{2, 2}});
    ParameterStore p(specs);
    const ReductionPlan plan = reduction_plan_of(p, 12);
    REQUIRE(plan.mlp.size() == 12);
    for (int l : {1, 10, 11}) {
      CAPTURE(l);
      const int64_t mlp = p.offset_of("layers." + std::to_string(l) + ".mlp.up_proj.weight");
      const int64_t attn = p.offset_of("layers." + std::to_string(l) + ".self_attn.q_proj.weight");
      CHECK(plan.mlp[size_t(l)] == FlatRange{mlp, mlp + 4});
      CHECK(plan.attention[size_t(l)] == FlatRange{attn, attn + 4});
    }
  }
}

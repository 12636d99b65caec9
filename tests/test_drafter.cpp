// The DFlash drafter against the golden float64 reference: one step's loss, accuracy, tau
// estimate, per-slot CE, weights, labels, argmax, output, logits and every parameter gradient,
// eager and recorded, with and without checkpointing; then one AdamW step. The parameter list's
// shapes and the default target layers, by hand.
#include "graphs/program.h"
#include "model/dflash_ops.h"
#include "model/drafter.h"
#include "runtime/safetensors.h"
#include "tests/recompute_choice.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {
DrafterSpec golden_spec() { return golden_drafter_spec(); }

struct Golden {
  SafeTensors target{golden_dir() / "target-qwen3" / "model.safetensors"};
  SafeTensors init{golden_dir() / "drafter_init.safetensors"};
  SafeTensors batch{golden_dir() / "batch.safetensors"};
  SafeTensors expected{golden_dir() / "expected.safetensors"};
};

std::unique_ptr<Drafter> golden_drafter(const Golden& g) {
  auto d = std::make_unique<Drafter>(golden_spec(), g.target.load("model.embed_tokens.weight", DType::f32),
                                     g.target.load("lm_head.weight", DType::f32));
  for (const ParamSpec& p : d->params().specs()) {
    std::vector<float> v = g.init.read_floats(p.name);
    REQUIRE(int64_t(v.size()) == p.shape.numel());
    d->params().master(p.name).copy_from_host(v.data(), v.size() * 4);
  }
  return d;
}

DrafterInputs golden_inputs(const Golden& g) {
  return {g.batch.load("input_ids", DType::i32), g.batch.load("loss_mask", DType::i32),
          g.batch.load("anchors", DType::i32), g.batch.load("keep", DType::i32),
          g.batch.load("target_hidden", DType::f32)};
}

void check_close(const std::string& what, const std::vector<float>& got, const std::vector<float>& want, double tol = 1e-4) {
  INFO(what << ": rel err " << rel_err(got, want));
  CHECK(rel_err(got, want) <= tol);
}
}  // namespace

TEST_SUITE("drafter") {
  TEST_CASE("one step reproduces the golden loss, metrics, outputs and every gradient") {
    CpuRuntime rt;
    Golden g;
    for (bool recorded : {false, true})
      for (bool ckpt : {false, true}) {
        CAPTURE(recorded);
        CAPTURE(ckpt);
        auto d = golden_drafter(g);
        DrafterInputs in = golden_inputs(g);
        Tensor loss = Tensor::persistent({1}, DType::f32), sums = Tensor::persistent({7}, DType::f32);
        Tensor out = Tensor::persistent({2, 20, 64}, DType::f32), logits = Tensor::persistent({2, 20, 320}, DType::f32);
        Tensor ce = Tensor::persistent({40}, DType::f32), lw = Tensor::persistent({40}, DType::f32);
        Tensor labels = Tensor::persistent({40}, DType::i32), argmax = Tensor::persistent({40}, DType::i32);
        Tensor head = g.target.load("lm_head.weight", DType::f32);
        auto body = [&] {
          DrafterOutputs o = d->forward(in, ckpt, 16);
          {
            NoGrad ng;
            ops::copy_(logits, ops::linear(o.output, head));
          }
          backward(o.loss);
          ops::copy_(loss, o.loss);
          ops::copy_(sums, o.sums);
          ops::copy_(out, o.output);
          ops::copy_(ce, o.ce.ce);
          ops::copy_(argmax, o.ce.argmax);
          ops::copy_(lw, o.prepared.lw.reshape({40}));
          ops::copy_(labels, o.prepared.labels.reshape({40}));
        };
        if (recorded) {
          rt.ctx.reserve_arena(plan_program(rt.ctx, "golden", body).arena_bytes);
          record_program(rt.ctx, "golden", body).replay();
        } else {
          body();
        }
        std::vector<float> s = sums.to_floats();
        CHECK(loss.item() == doctest::Approx(4.011123093258535).epsilon(1e-5));
        CHECK(s[0] / (s[1] + 1e-6) == doctest::Approx(4.011123093258535).epsilon(1e-5));
        CHECK(s[2] / (s[3] + 1e-6) == doctest::Approx(0.3043478128544429).epsilon(1e-5));
        CHECK(s[4] / s[5] == doctest::Approx(1.625).epsilon(1e-6));
        // Slot 0 of each block (weight 0) is not computed: ce 0 and argmax -1 there.
        const int64_t bs = d->spec().block_size;
        std::vector<float> want_ce = g.expected.read_floats("ce");
        std::vector<int32_t> want_argmax = g.expected.read_ints("argmax");
        REQUIRE(want_ce.size() % size_t(bs) == 0);
        for (size_t i = 0; i < want_ce.size(); i += size_t(bs)) {
          want_ce[i] = 0.0f;
          want_argmax[i] = -1;
        }
        check_close("ce", ce.to_floats(), want_ce);
        check_close("loss_weights", lw.to_floats(), g.expected.read_floats("loss_weights"));
        CHECK(labels.to_ints() == g.expected.read_ints("labels"));
        CHECK(argmax.to_ints() == want_argmax);
        check_close("drafter_output", out.to_floats(), g.expected.read_floats("drafter_output"));
        check_close("logits", logits.to_floats(), g.expected.read_floats("logits"));
        for (const ParamSpec& p : d->params().specs())
          check_close("grad." + p.name, d->params().grad(p.name).to_floats(), g.expected.read_floats("grad." + p.name));
      }
  }

  TEST_CASE("every recompute choice (entire, in part, none) gives the same loss and gradients bit for bit") {
    CpuRuntime rt;
    Golden g;
    const DrafterInputs in = golden_inputs(g);
    const int64_t layers = golden_spec().num_hidden_layers;
    REQUIRE(layers >= 2);
    auto run = [&](Recompute r) {
      auto d = golden_drafter(g);
      return recorded_loss_and_grads(rt.ctx, *d, in, r);
    };
    const std::vector<float> none = run(Recompute{});
    for (const Recompute& r : recompute_ladder(layers, true)) {
      CAPTURE(r.full);
      CAPTURE(r.partial);
      CHECK(bitwise_equal(run(r), none));
    }
    CHECK_THROWS_WITH_AS(run(Recompute{layers, 1}), doctest::Contains("but it has"), Error);
  }

  TEST_CASE("a layer recomputed in part costs its q, k, v share of the recomputed GEMM work") {
    DrafterSpec s = golden_spec();  // Qwen3-8B's drafter dims
    s.hidden_size = 4096;
    s.intermediate_size = 12288;
    s.num_attention_heads = 32;
    s.num_key_value_heads = 8;
    s.head_dim = 128;
    // 4096:512 with blocks of 16: T = 8192. Multiply-adds per layer, in units of 2^30:
    // q 8192*4096*4096 = 128, k and v 2*12288*4096*1024 = 96, o 128, gate and up 2*8192*4096*12288 = 768.
    CHECK(partial_recompute_cost(s, 4096, 8192) == doctest::Approx(224.0 / 1120.0).epsilon(1e-12));
    // The context adds to k and v only: 65536:512 costs more than half again as much.
    CHECK(partial_recompute_cost(s, 65536, 8192) == doctest::Approx((128.0 + 2 * 73728 / 1024.0 * 4) /
                                                                    (128.0 + 2 * 73728 / 1024.0 * 4 + 128 + 768))
                                                        .epsilon(1e-12));
    CHECK(partial_recompute_cost(s, 65536, 8192) > partial_recompute_cost(s, 4096, 8192));
  }

  TEST_CASE("one AdamW step from the golden gradient reproduces after_adamw") {
    CpuRuntime rt;
    Golden g;
    auto d = golden_drafter(g);
    DrafterOutputs o = d->forward(golden_inputs(g), true, 1024);
    backward(o.loss);
    OptimizerConfig c;
    c.lr = 1e-3f;
    c.weight_decay = 0.1f;
    c.max_grad_norm = 0;
    AdamWOptimizer opt(d->params(), c);
    Tensor stats = Tensor::persistent({2}, DType::f32);
    opt.update(1.0f, stats);
    for (const ParamSpec& p : d->params().specs())
      check_close("after_adamw." + p.name, d->params().master(p.name).to_floats(),
                  g.expected.read_floats("after_adamw." + p.name));
  }

  TEST_CASE("drafter spec errors name the key and the fix") {
    CpuRuntime rt;
    DrafterSpec s = golden_spec();
    s.mask_token_id = 320;
    CHECK_THROWS_WITH_AS(validate_drafter_spec(s), doctest::Contains("drafter.mask_token_id = 320 is outside"), Error);
    s = golden_spec();
    s.target_layer_ids = {1, 4};
    CHECK_THROWS_WITH_AS(validate_drafter_spec(s), doctest::Contains("target.layer_ids holds 4"), Error);
    s = golden_spec();
    s.num_key_value_heads = 3;
    CHECK_THROWS_WITH_AS(validate_drafter_spec(s), doctest::Contains("not a multiple of num_key_value_heads"), Error);
    s = golden_spec();
    Tensor small = Tensor::persistent({320, 32}, DType::f32);
    CHECK_THROWS_WITH_AS(Drafter(s, small, small), doctest::Contains("must equal the target's"), Error);
  }

  TEST_CASE("default target layer ids follow docs/MODEL.md") {
    CHECK(default_target_layer_ids(36, 1) == std::vector<int64_t>{18});
    CHECK(default_target_layer_ids(36, 5) == std::vector<int64_t>{1, 9, 17, 25, 33});
    CHECK(default_target_layer_ids(4, 2) == std::vector<int64_t>{1, 1});
    // round(1 + 1*(10-4)/4) = round(2.5) = 2 (ties to even), round(1 + 3*6/4) = round(5.5) = 6.
    CHECK(default_target_layer_ids(10, 5) == std::vector<int64_t>{1, 2, 4, 6, 7});
  }
  TEST_CASE("dflash_prepare refuses a loss_mask or keep whose shape is not the ids' or the anchors'") {
    CpuRuntime rt;
    const Tensor ids = Tensor::from_ints({1, 8}, {1, 2, 3, 4, 5, 6, 7, 8});
    const Tensor mask = Tensor::from_ints({1, 8}, {0, 1, 1, 1, 1, 1, 1, 1});
    const Tensor anchors = Tensor::from_ints({1, 2}, {1, 3});
    CHECK_THROWS_WITH_AS(dflash_prepare(ids, mask, anchors, Tensor::from_ints({1, 3}, {1, 1, 1}), 4, 0, 7.0),
                         doctest::Contains("dflash_prepare: keep is"), Error);
    CHECK_THROWS_WITH_AS(dflash_prepare(ids, mask, anchors, Tensor::from_ints({2, 1}, {1, 1}), 4, 0, 7.0),
                         doctest::Contains("dflash_prepare: keep is"), Error);
    CHECK_THROWS_WITH_AS(dflash_prepare(ids, Tensor::from_ints({1, 7}, {0, 1, 1, 1, 1, 1, 1}), anchors,
                                        Tensor::from_ints({1, 2}, {1, 1}), 4, 0, 7.0),
                         doctest::Contains("dflash_prepare: loss_mask is"), Error);
    CHECK_NOTHROW(dflash_prepare(ids, mask, anchors, Tensor::from_ints({1, 2}, {1, 1}), 4, 0, 7.0));
  }

  TEST_CASE("drafter parameters: Linear weights are [out, in] with q = heads * head_dim and kv = kv_heads * head_dim") {
    DrafterSpec s;
    s.hidden_size = 8, s.intermediate_size = 12, s.num_attention_heads = 4, s.num_key_value_heads = 2, s.head_dim = 4;
    s.target_layer_ids = {1, 2, 3};
    std::vector<std::pair<std::string, std::vector<int64_t>>> got;
    for (const ParamSpec& p : drafter_param_specs(s)) got.push_back({p.name, p.shape.vec()});
    const std::vector<std::pair<std::string, std::vector<int64_t>>> want = {
        {"fc.weight", {8, 24}},
        {"hidden_norm.weight", {8}},
        {"layers.0.input_layernorm.weight", {8}},
        {"layers.0.self_attn.q_proj.weight", {16, 8}},
        {"layers.0.self_attn.k_proj.weight", {8, 8}},
        {"layers.0.self_attn.v_proj.weight", {8, 8}},
        {"layers.0.self_attn.o_proj.weight", {8, 16}},
        {"layers.0.self_attn.q_norm.weight", {4}},
        {"layers.0.self_attn.k_norm.weight", {4}},
        {"layers.0.post_attention_layernorm.weight", {8}},
        {"layers.0.mlp.gate_proj.weight", {12, 8}},
        {"layers.0.mlp.up_proj.weight", {12, 8}},
        {"layers.0.mlp.down_proj.weight", {8, 12}},
        {"norm.weight", {8}},
    };
    CHECK(got == want);
  }

  TEST_CASE("default target layers: one feature takes L // 2 (odd L rounds down); no features are refused") {
    CHECK(default_target_layer_ids(5, 1) == std::vector<int64_t>{2});
    CHECK(default_target_layer_ids(37, 1) == std::vector<int64_t>{18});
    CHECK_THROWS_WITH_AS(default_target_layer_ids(36, 0),
                         doctest::Contains("default target layers: target has 36 layers and the drafter 0"), Error);
  }
}

// Logic written inline in headers (bf16/f16 conversions, shapes, tensors, contexts, splitmix64, seeds, step
// results, config defaults), the drafter's parameter list and the cluster's CPU-build refusal, checked against
// values written by hand: IEEE bit patterns, docs/config.md's defaults, splitmix64's published first outputs.
#include <bit>
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "data/data.h"
#include "dist/launch.h"
#include "graphs/engine.h"
#include "graphs/program.h"
#include "model/drafter_spec.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/splitmix.h"
#include "tests/config_test_util.h"
#include "tests/test_util.h"
#include "train/bucket_step.h"
#include "train/cluster.h"

using namespace dflash;
using namespace dflash::test;

namespace {
float from_bits(uint32_t u) { return std::bit_cast<float>(u); }
uint32_t bits_of(float f) { return std::bit_cast<uint32_t>(f); }
}  // namespace

TEST_SUITE("inline-wiring") {
  TEST_CASE("bf16 from f32: NaN stays NaN with the quiet bit set, infinity stays infinity, FLT_MAX rounds to it") {
    CHECK(f32_to_bf16(from_bits(0x7f800001u)) == 0x7fc0);  // payload only in the dropped half
    CHECK(f32_to_bf16(from_bits(0xff800001u)) == 0xffc0);
    CHECK(f32_to_bf16(from_bits(0x7fa00000u)) == 0x7fe0);
    CHECK(f32_to_bf16(from_bits(0x7f800000u)) == 0x7f80);  // +inf
    CHECK(f32_to_bf16(from_bits(0xff800000u)) == 0xff80);  // -inf
    CHECK(f32_to_bf16(from_bits(0x7f7fffffu)) == 0x7f80);  // FLT_MAX lies above bf16's max + half an ulp
    CHECK(f32_to_bf16(from_bits(0x7f7f7fffu)) == 0x7f7f);  // just below the halfway point: bf16's max
  }

  TEST_CASE("f16 to f32: NaN stays NaN, infinities keep their sign") {
    CHECK(bits_of(f16_to_f32(0x7e00)) == 0x7fc00000u);  // the quiet NaN
    CHECK(std::isnan(f16_to_f32(0x7c01)));               // the smallest payload
    CHECK(std::isnan(f16_to_f32(0xfe00)));
    CHECK(bits_of(f16_to_f32(0xfc00)) == 0xff800000u);
  }

  TEST_CASE("shapes of different rank differ, even when one is the other's prefix") {
    CHECK_FALSE(Shape{2, 3} == Shape{2, 3, 4});
    CHECK(Shape{2, 3} != Shape{2, 3, 4});
    CHECK_FALSE(Shape{} == Shape{5});
    CHECK(Shape{2, 3} == Shape::of({2, 3}));
    CpuRuntime rt;
    Tensor t = Tensor::persistent({2, 3, 4}, DType::f32);
    CHECK_THROWS_WITH_AS(check_shape("op", t, {2, 3}, "x"), doctest::Contains("[2,3,4]"), Error);
  }

  TEST_CASE("data<T>() of another dtype is refused, naming the tensor") {
    CpuRuntime rt;
    Tensor t = Tensor::from_floats({2}, {1.0f, 2.0f});
    CHECK_THROWS_WITH_AS(t.data<int32_t>(), doctest::Contains("data<i32>() on f32[2]"), Error);
    CHECK_THROWS_WITH_AS(t.data<uint16_t>(), doctest::Contains("read it with its own dtype"), Error);
    CHECK(t.data<float>()[1] == 2.0f);
  }

  TEST_CASE("a host copy inside a planning pass is refused like one while recording") {
    CpuRuntime rt;
    Tensor t = Tensor::from_floats({2}, {1.0f, 2.0f});
    CHECK_THROWS_WITH_AS(plan_program(rt.ctx, "p", [&] { (void)t.to_floats(); }),
                         doctest::Contains("while recording 'p'"), Error);
    CHECK(t.to_floats() == std::vector<float>{1.0f, 2.0f});  // eager again afterwards
  }

  TEST_CASE("a plan whose offline placement packs tighter needs the placement's bytes, not the online best fit's") {
    CpuRuntime rt;
    const PlanResult p = plan_program(rt.ctx, "p", [] {
      Tensor a = Tensor::empty({16}, DType::f32);  // 64 bytes at 0
      Tensor b = Tensor::empty({32}, DType::f32);  // 128 bytes at 64
      a = Tensor();                                // frees [0, 64): too small for c
      Tensor c = Tensor::empty({32}, DType::f32);  // online: at 192, so 320 bytes
    });
    CHECK(p.arena_bytes == 320);
    REQUIRE(p.placement);
    CHECK(p.needed_bytes() == 256);  // offline: b at 0, c at 128, a at 128 (it dies before c is made)
  }

  TEST_CASE("splitmix64 gives the published first outputs; seeds mix (base, epoch, index) in that order") {
    CHECK(splitmix64(0) == 0xe220a8397b1dcdafull);  // SplitMix64's first output from state 0
    CHECK(splitmix64(0x9e3779b97f4a7c15ull) == 0x6e789e6aa1b965f4ull);  // its second
    CHECK(splitmix64(1) == 0x910a2dec89025cc1ull);
    MicroBatch mb;
    mb.epoch = 2, mb.index = 5;
    // splitmix64(splitmix64(splitmix64(7) ^ 2) ^ 5), computed outside the project.
    CHECK(mb.anchor_seed(7) == 0x78bc1f9975e91647ull);
  }

  TEST_CASE("a step result's tau is 0 without blocks; accuracy is correct over predicted") {
    StepResult r;
    CHECK(r.tau() == 0.0);
    r.sums[4] = 6, r.sums[5] = 2;
    CHECK(r.tau() == 3.0);
    r.sums[2] = 3, r.sums[3] = 4;
    CHECK(r.accuracy() == doctest::Approx(0.75).epsilon(1e-5));
  }

  TEST_CASE("absent keys keep docs/config.md's defaults: runtime, eval and optimizer keys") {
    const Config c = config::parse(config::kMinimal);
    CHECK(c.runtime.heartbeat_timeout_s == 30.0);
    CHECK(c.runtime.rendezvous_timeout_s == 300.0);
    CHECK(c.runtime.rendezvous_port == 0);
    CHECK_FALSE(c.runtime.shard_optimizer);
    CHECK_FALSE(c.runtime.overlap_reduction);
    CHECK(c.runtime.reduce_dtype == "f32");
    CHECK(c.runtime.arena_gb == 0.0);
    CHECK(c.training.beta1 == 0.9);
    CHECK(c.training.min_lr_ratio == 0.0);
    CHECK(c.drafter.init_std == 0.02);
    CHECK(c.eval.spec_every == 0);
    CHECK(c.eval.spec_max_new_tokens == 128);
    CHECK(c.eval.spec_prefill_chunk == 128);
    CHECK_FALSE(c.eval.spec_ignore_eos);
  }

  TEST_CASE("the recompute ladder offers partial recomputation up to 12 segments, whole layers beyond") {
    CHECK(recompute_ladder(12, true).size() == 91);  // (full, partial) with full + partial <= 12
    CHECK(recompute_ladder(13, true).size() == 14);  // 0..13 whole layers
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

#ifndef DFLASH_NCCL
  TEST_CASE("a launched process in a build without NCCL is refused, naming its rank, world and launcher") {
    LaunchInfo l;
    l.launcher = "torchrun", l.rank = 1, l.world = 2, l.master_addr = "127.0.0.1", l.master_port = 29500;
    std::vector<std::string> logged;
    CHECK_THROWS_WITH_AS(ProcessGroup::join(Config{}, l, [&](const std::string& s) { logged.push_back(s); }),
                         doctest::Contains("this process is RANK=1 of WORLD_SIZE=2 (torchrun), but this build has no NCCL"),
                         Error);
    CHECK(logged.empty());
  }
#endif
}

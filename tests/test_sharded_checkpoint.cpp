// Sharded checkpoints (train/sharded_checkpoint.h): two ranks' shards and the manifest's ranges, rank 1's
// bytes by hand, loaded into a plain and a sharded store; a rank at another step and a missing shard refused.
#include <memory>

#include <nlohmann/json.hpp>

#include "dist/coordinator.h"
#include "tests/checkpoint_io_util.h"
#include "train/sharded_checkpoint.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

TEST_SUITE("sharded-checkpoint") {
  TEST_CASE("sharded checkpoint: two ranks' shards cover their own ranges and load into any store; bad saves refused") {
    CpuRuntime rt;
    TempDir dir("state-shard");
    // a (40 floats) straddles the two ranks' 32-float slices of the 64-float flat buffers: a at 0
    // (padded to 48, 64-byte alignment), b at 48 (padded to 64).
    const std::vector<ParamSpec> specs = {{"a", Shape{40}}, {"b", Shape{7}}};
    std::vector<float> va(40), vb(7);
    for (size_t i = 0; i < va.size(); ++i) va[i] = 1.0f + 0.25f * float(i);
    for (size_t i = 0; i < vb.size(); ++i) vb[i] = -3.0f - float(i);
    std::vector<std::unique_ptr<ParameterStore>> stores;
    std::vector<std::unique_ptr<AdamWOptimizer>> opts;
    for (int r = 0; r < 2; ++r) {
      stores.push_back(std::make_unique<ParameterStore>(specs, ShardLayout{2, r, true}));
      REQUIRE(stores.back()->padded_numel() == 64);
      REQUIRE(stores.back()->flat_master().numel() == 32);
      stores.back()->set_values("a", va.data());
      stores.back()->set_values("b", vb.data());
      opts.push_back(std::make_unique<AdamWOptimizer>(*stores.back(), OptimizerConfig{}));
      std::vector<float> m(32), v(32);  // m = flat index + 0.5, v = 1000 + flat index
      for (int i = 0; i < 32; ++i) m[size_t(i)] = float(32 * r + i) + 0.5f, v[size_t(i)] = float(1000 + 32 * r + i);
      opts.back()->adam_m().copy_from_host(m.data(), m.size() * sizeof(float));
      opts.back()->adam_v().copy_from_host(v.data(), v.size() * sizeof(float));
    }
    const std::vector<LocalShard> both = {{0, stores[0].get(), opts[0].get()}, {1, stores[1].get(), opts[1].get()}};
    LocalCoordinator coord;
    const fs::path ck = save_sharded_checkpoint(dir.path, 0, both, coord, {{"k", 7}}, nullptr);

    const nlohmann::json manifest = nlohmann::json::parse(read_raw(ck / "manifest.json"));
    CHECK(manifest["world"] == 2);
    CHECK(manifest["parameters"][1]["offset"] == 48);
    for (int r = 0; r < 2; ++r) {
      CHECK(manifest["shards"][size_t(r)]["begin"] == 32 * r);
      CHECK(manifest["shards"][size_t(r)]["count"] == 32);
    }
    {  // rank 1's master slice [32, 64): a[32, 40), padding, b, padding
      std::vector<float> want(32, 0.0f);
      for (int i = 0; i < 8; ++i) want[size_t(i)] = va[size_t(32 + i)];
      for (int i = 0; i < 7; ++i) want[size_t(16 + i)] = vb[size_t(i)];
      CHECK(SafeTensors(ck / "shard-00001-of-00002.safetensors").read_floats("master") == want);
    }

    ParameterStore plain(specs);
    AdamWOptimizer plain_opt(plain, OptimizerConfig{});
    CHECK(load_any_checkpoint(ck, plain, plain_opt)["k"] == 7);
    CHECK(plain.master("a").to_floats() == va);
    CHECK(plain.master("b").to_floats() == vb);
    const std::vector<float> m = plain_opt.adam_m().to_floats(), v = plain_opt.adam_v().to_floats();
    REQUIRE(m.size() == 64);
    for (size_t j = 0; j < 64; ++j) {
      CHECK(m[j] == float(j) + 0.5f);
      CHECK(v[j] == float(1000 + j));
    }
    ParameterStore second(specs, ShardLayout{2, 1, true});
    AdamWOptimizer second_opt(second, OptimizerConfig{});
    load_any_checkpoint(ck, second, second_opt);
    const std::vector<float> m1 = second_opt.adam_m().to_floats();
    for (size_t i = 0; i < 32; ++i) CHECK(m1[i] == float(32 + i) + 0.5f);

    // A rank whose optimizer is at another step, and a save that lacks a rank's shard: no checkpoint.
    const int32_t three = 3;
    opts[1]->step_counter().copy_from_host(&three, sizeof three);
    TempDir other("state-shard-step");
    CHECK_ERROR(save_sharded_checkpoint(other.path, 0, both, coord, {}, nullptr),
                "process 0 could not write its shard: rank 1 has done 3 optimizer steps, not 0");
    CHECK_FALSE(fs::exists(other.path / "checkpoints" / "step-0"));
    TempDir half("state-shard-half");
    CHECK_ERROR(save_sharded_checkpoint(half.path, 0, {both[0]}, coord, {}, nullptr), "expected 2 shard files, got 1");
    CHECK_FALSE(fs::exists(half.path / "checkpoints" / "step-0"));
  }
}

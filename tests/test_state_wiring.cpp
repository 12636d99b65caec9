// The state files' wiring: sharded and plain checkpoints (manifest ranges, refusals, markers), the
// sharded store's slices, the CPU communicator's refusals, target config fields, spec decoder bounds, the stash.
#include <memory>

#include "dist/comm.h"
#include "graphs/checkpoint.h"
#include "model/hf_config.h"
#include "runtime/autograd.h"
#include "tests/checkpoint_io_util.h"
#include "tests/spec_test_util.h"
#include "tests/target_fixtures.h"
#include "train/sharded_checkpoint.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;

TEST_SUITE("state-wiring") {
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

  TEST_CASE("checkpoint marker: a file grown after the save is named even when checksums are skipped") {
    CpuRuntime rt;
    TempDir dir("state-marker");
    Trained a(small_spec(), 1, 1);
    save_checkpoint(dir.path, 1, a.params, a.opt, {{"k", 1}});
    const fs::path ck = dir.path / "checkpoints" / "step-1";
    const std::string state = read_raw(ck / "state.json");
    CHECK_FALSE(checkpoint_problem(ck, false));
    write_raw(ck / "state.json", state + " ");
    const std::optional<std::string> problem = checkpoint_problem(ck, false);
    REQUIRE(problem);
    CHECK(*problem == "state.json has " + std::to_string(state.size() + 1) + " bytes but COMPLETE.json records " +
                          std::to_string(state.size()) + " (the file was truncated or rewritten after the save)");
  }

  TEST_CASE("checkpoint load: a v moment of another shape is refused by name and shape, and nothing is loaded") {
    CpuRuntime rt;
    TempDir dir("state-load");
    Trained a(small_spec(), 1, 1);
    save_checkpoint(dir.path, 1, a.params, a.opt, {{"k", 1}});
    const fs::path ck = dir.path / "checkpoints" / "step-1";
    int64_t numel = 0;
    {
      const SafeTensors moments(ck / "optimizer.safetensors");
      std::vector<std::vector<float>> data;
      std::vector<std::vector<int64_t>> shapes;
      for (const std::string& n : moments.names()) {
        if (n == "step") continue;
        data.push_back(moments.read_floats(n));
        shapes.push_back(moments.info(n).shape);
        if (n == "v.fc.weight") {
          REQUIRE(shapes.back().size() == 2);
          numel = int64_t(data.back().size());
          shapes.back() = {numel};  // the same values, flattened
        }
      }
      REQUIRE(numel > 0);
      std::vector<SafeTensorsEntry> entries;
      size_t i = 0;
      for (const std::string& n : moments.names())
        if (n != "step") entries.push_back({n, "F32", shapes[i], data[i].data()}), ++i;
      const std::vector<int32_t> step = moments.read_ints("step");
      entries.push_back({"step", "I32", {1}, step.data()});
      write_safetensors(dir / "flat-v.safetensors", entries);
    }
    write_raw(ck / "optimizer.safetensors", read_raw(dir / "flat-v.safetensors"));
    reseal(ck);
    Trained b(small_spec(), 9, 0);
    const Snapshot before(b);
    CHECK_ERROR(load_checkpoint(ck, b.params, b.opt),
                "optimizer.safetensors': tensor 'v.fc.weight' has shape [" + std::to_string(numel) +
                    "] but the model's parameter is");
    check_same(before, Snapshot(b));
  }

  TEST_CASE("checkpoint save: a drafter spec with the store's names but other shapes is refused") {
    CpuRuntime rt;
    TempDir dir("state-save");
    Trained a(small_spec(), 1, 0);
    DrafterSpec wider = small_spec();
    wider.intermediate_size = 24;
    const std::vector<ParamSpec> specs = drafter_param_specs(wider);
    REQUIRE(specs.size() == a.params.specs().size());
    for (size_t i = 0; i < specs.size(); ++i) REQUIRE(specs[i].name == a.params.specs()[i].name);
    CHECK_ERROR(save_checkpoint(dir.path, 0, a.params, a.opt, {}, &wider),
                "the drafter spec given does not describe this parameter store");
    CHECK_FALSE(fs::exists(dir.path / "checkpoints" / "step-0"));
    const DrafterSpec same = small_spec();
    save_checkpoint(dir.path, 0, a.params, a.opt, {}, &same);
    CHECK(fs::exists(dir.path / "checkpoints" / "step-0" / kCheckpointDrafterConfig));
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

  TEST_CASE("thread communicator: another size registered, a shorter all_reduce and an uneven reduce_scatter refused") {
    CpuRuntime rt;
    std::vector<float> a(4), b(5);
    ThreadCommunicator two(2, 0);
    two.register_buffer(0, a.data(), 4);
    CHECK_ERROR(two.register_buffer(1, b.data(), 5),
                "ThreadCommunicator::register_buffer: rank 1 registers 5 floats but the others 4");
    ThreadCommunicator one(1, 4);
    one.register_buffer(0, a.data(), 4);
    CHECK_NOTHROW(one.all_reduce_sum(a.data(), 4, 0));
    CHECK_ERROR(one.all_reduce_sum(a.data(), 3, 0), "all_reduce: rank 0 passed a buffer other than the one registered");
    // Refused before any rank waits; the aborted barrier makes a call that got past the check fail
    // at once instead of waiting for a rank 1 that never comes.
    ThreadCommunicator pair(2, 0);
    pair.abort();
    const Tensor five = randn(Shape{5}, 1);
    CHECK_ERROR(reduce_scatter_(&pair, five, 0), "does not split into 2 equal slices");
  }

  TEST_CASE("target config: n_routed_experts is refused; rope_parameters' theta wins; a class name is no model_type") {
    CpuRuntime rt;
    TempDir tmp("state-target");
    const fs::path qwen = make_target(tmp, "qwen");
    auto edited = [&](const std::function<void(json&)>& edit) {
      const fs::path copy = tmp / "copy";
      fs::remove_all(copy);
      fs::copy(qwen, copy);
      edit_config(copy, edit);
      return copy;
    };
    CHECK_ERROR(read_target_spec(edited([](json& j) { j["n_routed_experts"] = 8; })),
                "a mixture of experts (n_routed_experts: 8) is not supported");
    const TargetSpec s = read_target_spec(edited([](json& j) {
      j["rope_theta"] = 10000.0;
      j["rope_parameters"] = {{"rope_type", "default"}, {"rope_theta", 1000000.0}};
    }));
    CHECK(s.rope_theta == 1e6);
    CHECK_ERROR(read_target_spec(edited([](json& j) { j["model_type"] = "Qwen3ForCausalLM"; })),
                "model_type \"Qwen3ForCausalLM\" is not supported");
  }

  TEST_CASE("spec decoder: a block may end exactly at the capacity; max_new_tokens 0 is refused") {
    CpuRuntime rt;
    SpecDecoderOptions o;
    o.max_len = 44;
    o.prefill_chunk = 64;
    o.graphs = false;
    GoldenSpecModels m(Device::cpu(), o);
    REQUIRE(m.drafter->spec().block_size == 4);
    CHECK_NOTHROW(m.decoder->set_position(40));  // the block's positions 40..43 of 44
    CHECK_NOTHROW(m.decoder->replay_round());
    CHECK_ERROR(m.decoder->set_position(41), "set_position: 41 leaves no room for a block of 4 in the recorded capacity 44");
    CHECK_ERROR(check_decode_prompt({1, 2}, 0, 10, 100, 0, "d"), "d: max_new_tokens is 0; it must be >= 1");
  }

  TEST_CASE("checkpoint stash: kept values that are a view (rows 2 and 3 of a tensor) are adopted at their offset") {
    CpuRuntime rt;
    const Tensor base = randn(Shape{4, 3}, 5), x = randn(Shape{2, 5}, 6), w = randn(Shape{3, 5}, 7);
    const Tensor kept = base.rows(2, 4);
    Tensor skipped;
    {
      SkipLaunches skip(true);
      skipped = ops::linear(x, w);  // no memory of its own
    }
    adopt_kept_values(skipped, kept);
    const std::vector<float> all = base.to_floats();
    CHECK(skipped.to_floats() == std::vector<float>(all.begin() + 6, all.end()));
  }
}

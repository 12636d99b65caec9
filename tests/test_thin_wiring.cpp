// The thinly probed runtime, data and train files: safetensors' integer reads, writer padding and
// messages, the batch planner's shuffle and saved state, config key text, profile tables, context
// misuse, spec prompts and stop ids, target messages, rendezvous arguments and failures, overlap buckets.
#include <fstream>
#include <set>

#include "data/data.h"
#include "dist/rendezvous.h"
#include "graphs/overlap.h"
#include "runtime/profile.h"
#include "runtime/safetensors.h"
#include "tests/process_util.h"
#include "tests/target_fixtures.h"
#include "train/config_keys.h"
#include "train/spec_eval.h"

using namespace dflash;
using namespace dflash::test;

namespace {
std::string file_bytes(const std::filesystem::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}
}  // namespace

TEST_SUITE("thin-wiring") {
  TEST_CASE("safetensors: U8 reads as ints 0..255; an aligned header gets no padding; a missing name lists six") {
    TempDir dir("thin-st");
    std::vector<uint8_t> u = {0, 127, 128, 255};
    const auto p = dir / "u.safetensors";
    write_safetensors(p, {{"abcd", "U8", {4}, u.data()}});
    CHECK(SafeTensors(p).read_ints("abcd") == std::vector<int32_t>{0, 127, 128, 255});
    // This header is 56 bytes, a multiple of 8: the file is its length, it and the data, nothing between.
    const std::string header = R"({"abcd":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
    REQUIRE(header.size() == 56);
    const std::string bytes = file_bytes(p);
    REQUIRE(bytes.size() == 8 + 56 + 4);
    CHECK(uint8_t(bytes[0]) == 56);
    CHECK(bytes.substr(8, 56) == header);
    CHECK(bytes.substr(64) == std::string("\x00\x7f\x80\xff", 4));

    std::vector<SafeTensorsEntry> eight;
    for (const char* n : {"h", "g", "f", "e", "d", "c", "b", "a"}) eight.push_back({n, "U8", {1}, u.data()});
    write_safetensors(dir / "eight.safetensors", eight);
    CHECK_ERROR(SafeTensors(dir / "eight.safetensors").info("zz"),
                "tensor 'zz': no such tensor; the file has 8 tensors ('a', 'b', 'c', 'd', 'e', 'f', ...)");
  }

  TEST_CASE("planner: every order of three sequences occurs; a full saved group and the largest bucket") {
    BatchPlanner three({5, 5, 5}, {{16, 1, 3}}, OverflowPolicy::error, 0, "d");
    std::set<std::vector<int64_t>> orders;
    for (int64_t e = 0; e < 64; ++e) orders.insert(three.permutation(e));
    CHECK(orders.size() == 6);  // Fisher-Yates reaches all 3! orders, the identity included
    CHECK(orders.count({0, 1, 2}) == 1);

    BatchPlanner p({5, 5, 5, 5}, {{16, 1, 2}}, OverflowPolicy::error, 0, "d");
    PlannerState st = p.state();
    st.pending[0] = {0};
    p.restore(st);  // one of two: a group still filling
    st.pending[0] = {0, 1};
    CHECK_ERROR(p.restore(st), "d: the saved data position is inconsistent");

    // The largest bucket is the last one listed: a 100-token sequence is truncated into seq 64.
    const std::vector<Bucket> buckets = {{16, 1, 1}, {64, 1, 1}};
    BatchPlanner t({10, 100}, buckets, OverflowPolicy::truncate, 0, "d");
    CHECK(t.bucket_of(1) == 1);
    CHECK(t.is_truncated(1));
    CHECK_ERROR(BatchPlanner({10, 100}, buckets, OverflowPolicy::error, 0, "d"),
                "sequence 1 has 100 tokens, more than the largest bucket (seq 64)");
  }

  TEST_CASE("config keys: leaves after the last dot, substitutions as one edit, fixed text up to 10 characters") {
    using namespace config_detail;
    CHECK(leaf_of("target.synthetic.seed") == "seed");
    CHECK(keys_of_section("target.synthetic").rfind("enabled, architecture, vocab_size, ", 0) == 0);
    CHECK(suggestion("training.seed", all_keys()) ==
          "; did you mean job.seed or target.synthetic.seed or data.synthetic.seed or generate.seed?");
    CHECK(suggestion("trainimg.bete1", all_keys()) == "; did you mean training.beta1?");  // two substitutions
    CHECK(fmt_double(1e-8) == "0.00000001");
    CHECK(fmt_double(1234567.25) == "1234567.25");
    CHECK(fmt_double(1e-9) == "1e-09");
  }

  TEST_CASE("profile: rows average over replays; shares include idle; tracing's cost is per call") {
    auto call = [](const char* op) { return ProfiledCall{"p", op, "forward", CallCost{}, 0.0, 0}; };
    // Two calls of one row (4 + 2 ms over 4 replays: 1.5 ms) and one of another (8 ms: 2 ms).
    std::vector<ProfileRow> rows = profile_rows({call("a"), call("a"), call("b")}, {4.0, 2.0, 8.0}, 4, 0.0);
    REQUIRE(rows.size() == 2);
    CHECK(rows[0].op == "b");
    CHECK(rows[0].ms == 2.0);
    CHECK(rows[1].calls == 2);
    CHECK(rows[1].ms == 1.5);

    ProfileTableInput in;
    in.rows = {ProfileRow{"p", "forward", "x", "", 3, 3.0, 0, 0}, ProfileRow{"p", "forward", "y", "", 1, 1.0, 0, 0}};
    in.measured_ms = 5.0, in.traced_ms = 6.0, in.idle_bound_ms = 2.0;
    // Kernels 4 ms + idle 2 ms = 6 ms: shares 50%, 16.7% and 33.3%; tracing adds 1 ms over 4 calls.
    const std::string t = format_profile_table("t", in);
    INFO(t);
    CHECK(t.find("  50.0% ") != std::string::npos);
    CHECK(t.find("  16.7% ") != std::string::npos);
    CHECK(t.find("  33.3%") != std::string::npos);
    CHECK(t.find("tracing adds 1.000 ms, 250.00 us a call") != std::string::npos);
  }

  TEST_CASE("context: nested begin, a CPU recording without a sink and a persistent buffer after the seal are refused") {
    CpuRuntime rt;
    rt.ctx.begin(Mode::plan, "outer");
    CHECK_ERROR(rt.ctx.begin(Mode::plan, "inner"), "begin(plan, 'inner') while already in plan mode for 'outer'");
    rt.ctx.end();
    CHECK_ERROR(rt.ctx.begin(Mode::record, "loose"), "begin(record) on the CPU needs a sink for the kernel calls");
    if (rt.ctx.mode() != Mode::eager) rt.ctx.abort_recording();
    rt.ctx.seal();
    CHECK_ERROR(Tensor::persistent({4}, DType::f32), "persistent allocation of 16 bytes by op");
  }

  TEST_CASE("spec: prompts from data skip sequences trained on from the start; stop ids must lie below the vocab") {
    MemoryDataset data({{{1, 2, 3}, {0, 1, 1}}, {{4, 5}, {1, 1}}, {{6, 7}, {0, 0}}}, 10, "d.jsonl");
    int64_t skipped = -1;
    std::vector<SpecPrompt> prompts = spec_prompts_from_data(data, &skipped);
    REQUIRE(prompts.size() == 1);
    CHECK(prompts[0].ids == std::vector<int32_t>{1});
    CHECK(prompts[0].where == "d.jsonl sequence 0");
    CHECK(skipped == 2);

    EvalConfig e;
    e.spec_stop_token_ids = {9};
    std::string source;
    CHECK(spec_stop_ids(e, "unused", 10, &source) == std::vector<int32_t>{9});
    CHECK(source == "eval.spec_stop_token_ids");
    e.spec_stop_token_ids = {3, 10};
    CHECK_ERROR(spec_stop_ids(e, "unused", 10, &source),
                "eval.spec_stop_token_ids holds 10, outside the target's vocabulary [0, 10)");
  }

  TEST_CASE("target: ten unexplained tensors list eight and say 2 more") {
    CpuRuntime rt;
    TempDir tmp("thin-target");
    const fs::path dir = make_target(tmp, "t");
    edit_weights(dir, [](HostWeights& w) {
      for (int i = 0; i < 10; ++i) w["model.extra" + std::to_string(i) + ".weight"] = w.at("model.norm.weight");
    });
    CHECK_ERROR(Target(dir, {1}, 16), "the weights hold 10 tensors that config.json does not explain: ");
    CHECK_ERROR(Target(dir, {1}, 16), "'model.extra7.weight' (in 'model.safetensors'), and 2 more; fix:");
  }

  TEST_CASE("rendezvous: a port past 65535 and a rank past the world are refused; the first failure stays") {
    CHECK_ERROR(Rendezvous::join(rendezvous_options(0, 1, "127.0.0.1", 65536, 1.0)),
                "rendezvous: port 65536 (runtime.rendezvous_port) must lie in [1, 65535]");
    CHECK_ERROR(Rendezvous::join(rendezvous_options(2, 2, "127.0.0.1", free_port(), 0.2)), "rendezvous: rank 2 of world 2");

    auto r = Rendezvous::join(rendezvous_options(0, 1, "127.0.0.1", free_port(), 1.0));
    r->report_failure("the first");
    r->report_failure("the second");
    REQUIRE(r->failure());
    CHECK(r->failure()->find("stopped: the first") != std::string::npos);
    // This rank's own failure after its clean end still counts (only the watchdog's echoes do not).
    auto done = Rendezvous::join(rendezvous_options(0, 1, "127.0.0.1", free_port(), 1.0));
    done->finish();
    done->report_failure("late");
    REQUIRE(done->failure());
    CHECK(done->failure()->find("stopped: late") != std::string::npos);
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

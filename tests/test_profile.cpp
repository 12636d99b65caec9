// The profiler's table (`dflash-bench profile`, CPU): every GEMM row's FLOP is calls x 2MNK of its
// shape, the rows of one step add up to the FLOP formula of docs/MODEL.md, "FLOP counting" (computed
// here from the drafter's dims) less the lm_head rows of each block's slot 0, which the drafter skips, and checkpointed layers recompute their GEMMs but not the attention.
// The update row counts the optimizer's bytes; the online target's attention rows count its causal FLOP.
// The decode steps (speculative and batched) are one token a row through every layer and the lm_head.
// The table's rows average over replays, its shares count idle time, tracing's cost is per call.
#include <cstdio>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "runtime/profile.h"
#include "tests/test_util.h"

namespace {

struct Run {
  std::vector<nlohmann::json> rows;
  nlohmann::json summary;
  int exit_code = -1;
};

Run run_profile(const std::string& args) {
  Run r;
  const dflash::test::CommandOutput o =
      dflash::test::run_command(dflash::test::sibling_binary("dflash-bench") + " profile " + args);
  const std::string& out = o.text;
  r.exit_code = o.status;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    if (line.rfind("{\"profile_row\"", 0) == 0) r.rows.push_back(nlohmann::json::parse(line)["profile_row"]);
    if (line.rfind("{\"profile\"", 0) == 0) r.summary = nlohmann::json::parse(line)["profile"];
  }
  INFO(out);
  REQUIRE(r.exit_code == 0);
  REQUIRE(!r.rows.empty());
  REQUIRE(r.summary.is_object());
  return r;
}

// The step's FLOP as docs/MODEL.md counts them, for the tiny drafter of dflash-bench
// (hidden 64, intermediate 128, 2 layers, 4/2 heads of 16, vocab 512, 5 target layers, block 16).
double bench_formula(double S, double N, double pairs) {
  const double H = 64, I = 128, L = 2, nh = 4, nkv = 2, hd = 16, V = 512, F = 5, bs = 16, T = N * bs;
  const double q = nh * hd, kv = nkv * hd;
  const double fc = 2 * (2 * S * F * H * H);                                  // forward + weight gradient
  const double layers = 3 * L * 2 * (T * H * q + 2 * (S + T) * H * kv + T * q * H + 3 * T * H * I);
  const double attention = 3.5 * L * 4 * pairs * hd * nh;                     // forward x 3.5
  const double head = 2 * (2 * T * H * V);                                    // forward + input gradient
  return fc + layers + attention + head;
}

}  // namespace

using namespace dflash;

TEST_SUITE("profile") {
  TEST_CASE("dflash-bench profile on the CPU: GEMM rows are 2MNK each, the step adds up to the FLOP formula") {
    // (flags, layers recomputed entirely, in part); "" is fitted to the arena: both entirely.
    const std::vector<std::tuple<std::string, int, int>> choices = {
        {" --no-checkpointing", 0, 0}, {"", 2, 0}, {" --recompute=1+1", 1, 1}, {" --recompute=0+2", 0, 2}};
    for (const auto& [flags, full, partial] : choices) {
      INFO("flags '" << flags << "'");
      const bool checkpointing = full + partial > 0;
      Run r = run_profile("--model=tiny --bucket=128:4 --replays=2" + flags);
      CHECK(int(r.summary["recomputed"]) == full + partial);
      CHECK(int(r.summary["partially_recomputed"]) == partial);
      double counted = 0, total_ms = 0, recomputed_flop = 0;
      bool recomputed_gemm = false, recomputed_attention = false;
      double recompute_adds = 0, adamw_bytes = 0;
      for (const nlohmann::json& row : r.rows) {
        const std::string shape = row["shape"], phase = row["phase"], op = row["op"];
        const double flop = row["flop"], calls = row["calls"];
        total_ms += double(row["ms"]);
        CHECK(double(row["ms"]) >= 0.0);
        if (shape.rfind("gemm ", 0) == 0) {
          long long M = 0, N = 0, K = 0;
          REQUIRE(std::sscanf(shape.c_str(), "gemm M=%lld N=%lld K=%lld", &M, &N, &K) == 3);
          CHECK(flop == doctest::Approx(calls * 2.0 * double(M) * double(N) * double(K)).epsilon(1e-12));
        }
        if (op == "adamw") adamw_bytes += double(row["bytes"]);
        if (op == "dflash_attention") {
          const double per_pair = shape == "attention forward" ? 4.0 : 10.0;
          CHECK(flop == doctest::Approx(calls * per_pair * 16 * 4 * double(r.summary["visible_pairs"])).epsilon(1e-12));
        }
        if (phase == "recompute") {
          recomputed_gemm = recomputed_gemm || shape.rfind("gemm ", 0) == 0;
          recomputed_flop += flop;
          recomputed_attention = recomputed_attention || op == "dflash_attention";
          // The recomputation skips the layer's tail: the down projection (64 block rows, hidden
          // 64 from intermediate 128) and the residual adds' second half.
          CHECK(shape.rfind("gemm M=64 N=64 K=128 ", 0) == std::string::npos);
          if (op == "linear_residual" && shape.rfind("gemm ", 0) != 0) recompute_adds += calls;  // its add on the CPU
        } else {
          counted += flop;
        }
      }
      const double pairs = r.summary["visible_pairs"];
      // Each of the 4 blocks' 16 queries sees between its own block and the whole context.
      CHECK(pairs >= 4 * 16 * 16);
      CHECK(pairs <= 4 * 16 * (128 + 16));
      // The lm_head skips slot 0 of each of the 4 blocks (weight 0): the FLOP formula less those
      // rows' forward and input-gradient GEMMs (hidden 64, vocab 512); bench_flop is the formula.
      const double skipped_head = 2 * (2 * 4 * 64 * 512);
      CHECK(counted + skipped_head == doctest::Approx(bench_formula(128, 4, pairs)).epsilon(1e-9));
      CHECK(counted + skipped_head == doctest::Approx(double(r.summary["bench_flop"])).epsilon(1e-9));
      CHECK(recomputed_gemm == checkpointing);
      CHECK_FALSE(recomputed_attention);  // checkpointed layers keep the attention's output
      // A layer recomputed entirely runs q, k, v, o, gate and up again (not down); one recomputed in
      // part keeps o's residual and gate and up from its first run, so only q, k and v.
      const double T = 4 * 16, S = 128, H = 64, I = 128, q = 4 * 16, kv = 2 * 16;
      const double qkv = 2 * T * H * q + 2 * 2 * (S + T) * H * kv, o = 2 * T * q * H, gate_up = 2 * 2 * T * H * I;
      CHECK(recomputed_flop == doctest::Approx(full * (qkv + o + gate_up) + partial * qkv).epsilon(1e-12));
      CHECK(recompute_adds == full);  // the attention's residual add, per layer recomputed entirely
      // The update's traffic: 34 bytes an element of the tiny drafter's flat parameters (fc 5 x 64 x
      // 64, hidden_norm 64, per layer 2 norms of 64, q and o 64 x 64, k and v 32 x 64, q_norm and
      // k_norm 16, gate, up and down 128 x 64; the final norm 64; each a multiple of 16 already),
      // grads not zeroed (the bench's one micro-batch writes them fresh).
      const double params = 5 * 64 * 64 + 64 + 2 * (2 * 64 + 2 * 64 * 64 + 2 * 32 * 64 + 2 * 16 + 3 * 128 * 64) + 64;
      CHECK(adamw_bytes == 34 * params);
      CHECK(total_ms > 0.0);
    }
  }

  TEST_CASE("dflash-bench profile --online on the CPU: the target's rows are its layers up to the deepest one read") {
    // The tiny drafter's target (apps/bench_target.cpp): hidden 64, intermediate 3 x 64, 4/2 heads
    // of 16, 36 layers of which the drafter reads 1, 9, 17, 25 and 33, so 34 run; 128 tokens.
    Run r = run_profile("--model=tiny --bucket=128:4 --replays=2 --online");
    const double H = 64, I = 192, q = 4 * 16, kv = 2 * 16, S = 128, layers = 34, hd = 16, nh = 4;
    const double gemm_flop = layers * S * 2 * (H * q + 2 * H * kv + q * H + 3 * H * I);
    const double attention_flop = layers * 2 * 2 * (S * (S + 1) / 2) * hd * nh;  // causal, as docs/MODEL.md counts
    double target_gemm = 0, drafter_gemm = 0, target_attention = 0;
    bool update_rows = false;
    for (const nlohmann::json& row : r.rows) {
      const std::string shape = row["shape"], program = row["program"];
      if (program == "update") update_rows = true;
      if (std::string(row["op"]) == "causal_attention") {
        CHECK(program == "target/128");
        CHECK(shape == "causal attention forward");
        target_attention += double(row["flop"]);
      }
      if (shape.rfind("gemm ", 0) != 0) continue;
      long long M = 0, N = 0, K = 0;
      REQUIRE(std::sscanf(shape.c_str(), "gemm M=%lld N=%lld K=%lld", &M, &N, &K) == 3);
      if (program == "target/128") {
        CHECK(M == S);  // every target GEMM runs the 128 tokens
        CHECK(std::string(row["phase"]) == "forward");
        target_gemm += double(row["flop"]);
      } else {
        CHECK(program == "train/128");
        drafter_gemm += double(row["flop"]);
      }
    }
    CHECK(target_gemm == doctest::Approx(gemm_flop).epsilon(1e-12));
    CHECK(target_attention == doctest::Approx(attention_flop).epsilon(1e-12));
    CHECK(drafter_gemm > 0);
    CHECK(update_rows);
    // bench_flop: the drafter's formula plus the target's forward, its attention included.
    const double pairs = r.summary["visible_pairs"];
    CHECK(double(r.summary["bench_flop"]) ==
          doctest::Approx(bench_formula(128, 4, pairs) + gemm_flop + attention_flop).epsilon(1e-9));
  }

  TEST_CASE("dflash-bench profile --spec on the CPU: the decode step's GEMMs are one token through every layer and the lm_head") {
    // The small spec model: target hidden 256, intermediate 768, 8 layers, 8/2 heads of 32, vocab
    // 4096; drafter 2 layers, block 8.
    Run r = run_profile("--spec --model=small --context=64 --context=100 --replays=2");
    const double H = 256, I = 768, L = 8, q = 8 * 32, kv = 2 * 32, V = 4096, bs = 8;
    const double per_token = L * 2 * (H * q + 2 * H * kv + q * H + 3 * H * I) + 2 * H * V;
    // Two contexts, each a step table and a round table: the rows of each program add up per table.
    double step_flop = 0, verify_flop = 0, draft_rows = 0, attention_calls = 0;
    for (const nlohmann::json& row : r.rows) {
      const std::string shape = row["shape"], program = row["program"], op = row["op"];
      const double flop = row["flop"], calls = row["calls"];
      CHECK(double(row["ms"]) >= 0.0);
      if (shape.rfind("gemm ", 0) == 0) {
        long long M = 0, N = 0, K = 0;
        REQUIRE(std::sscanf(shape.c_str(), "gemm M=%lld N=%lld K=%lld", &M, &N, &K) == 3);
        CHECK(flop == doctest::Approx(calls * 2.0 * double(M) * double(N) * double(K)).epsilon(1e-12));
        if (program == "spec/step") CHECK(M == 1);
        if (program == "spec/verify") CHECK(M == bs);
      }
      if (program == "spec/step") step_flop += flop;
      if (program == "spec/verify") verify_flop += flop;
      if (program == "spec/draft") draft_rows += 1;
      if (program == "spec/step" && op == "cached_attention") attention_calls += calls;
    }
    CHECK(step_flop == doctest::Approx(2 * per_token).epsilon(1e-12));        // two contexts
    CHECK(verify_flop == doctest::Approx(2 * bs * per_token).epsilon(1e-12));  // a block of bs tokens
    CHECK(draft_rows > 0);
    CHECK(attention_calls == 2 * L);  // one cached attention a layer
    CHECK(std::string(r.summary["pass"]) == "round");
    CHECK(int(r.summary["context"]) == 100);
  }

  TEST_CASE("dflash-bench profile --generate on the CPU: the batched step's GEMMs are one token a slot through every layer and the lm_head") {
    // The small generate model: hidden 256, intermediate 768, 8 layers, 8/2 heads of 32, vocab 4096.
    Run r = run_profile("--generate --model=small --batch=3 --batch=5 --context=20 --replays=2");
    const double H = 256, I = 768, L = 8, q = 8 * 32, kv = 2 * 32, V = 4096;
    const double per_token = L * 2 * (H * q + 2 * H * kv + q * H + 3 * H * I) + 2 * H * V;
    // One table a batch; a GEMM's M is that batch, so the rows of the two tables add up to 3 + 5 tokens.
    double flop = 0, attention_calls = 0, gemms_of[6] = {0, 0, 0, 0, 0, 0};
    for (const nlohmann::json& row : r.rows) {
      const std::string shape = row["shape"], op = row["op"];
      CHECK(std::string(row["program"]) == "generate/step");
      flop += double(row["flop"]);
      if (shape.rfind("gemm ", 0) == 0) {
        long long M = 0, N = 0, K = 0;
        REQUIRE(std::sscanf(shape.c_str(), "gemm M=%lld N=%lld K=%lld", &M, &N, &K) == 3);
        REQUIRE((M == 3 || M == 5));
        gemms_of[M] += double(row["calls"]);
      }
      if (op == "slot_attention") attention_calls += double(row["calls"]);
    }
    CHECK(flop == doctest::Approx((3 + 5) * per_token).epsilon(1e-12));
    CHECK(gemms_of[3] == gemms_of[5]);  // the same program at both batches
    CHECK(attention_calls == 2 * L);     // one slot attention a layer, in each table
    CHECK(int(r.summary["batch"]) == 5);
    CHECK(int(r.summary["context"]) == 20);
  }

  TEST_CASE("dflash-bench profile refuses an unknown model with the choices") {
    const dflash::test::CommandOutput o =
        dflash::test::run_command(dflash::test::sibling_binary("dflash-bench") + " profile --model=gpt2");
    const std::string& out = o.text;
    CHECK(o.status != 0);
    CHECK(out.find("--model=gpt2") != std::string::npos);
    CHECK(out.find("small or qwen3-8b") != std::string::npos);
  }

  TEST_CASE("the GPU check: the measured replay must lie between the kernels' sum and that sum plus the traced gaps") {
    using dflash::ProfileTableInput;
    ProfileTableInput in;
    in.rows.resize(2);
    in.rows[0].ms = 1.5, in.rows[1].ms = 0.5;  // kernels: 2 ms
    in.idle_bound_ms = 0.8;                    // tracing saw 0.8 ms of gaps
    // A small step queued back to back: its launches overlap, so it takes about the kernels' sum
    // although the traced replay showed gaps (the case a fixed "kernels + traced gaps" check refused).
    in.measured_ms = 2.02;
    CHECK(dflash::profile_mismatch(in) == 0);
    CHECK(dflash::profile_idle_ms(in) == doctest::Approx(0.02));
    in.measured_ms = 2.8;  // every traced gap also idle in the measured replay
    CHECK(dflash::profile_mismatch(in) == 0);
    CHECK(dflash::profile_idle_ms(in) == doctest::Approx(0.8));
    // Work the records miss: measured beyond kernels + gaps, by (3.2 - 2.8) / 3.2.
    in.measured_ms = 3.2;
    CHECK(dflash::profile_mismatch(in) == doctest::Approx(0.125));
    CHECK(dflash::profile_idle_ms(in) == doctest::Approx(0.8));
    const std::string table = dflash::format_profile_table("t", in);
    CHECK(table.find("(no kernel running)") != std::string::npos);
    CHECK(table.find("by 12.50%") != std::string::npos);
    // Kernel times longer than the replay itself (overlapping records, or a wrong attribution).
    in.measured_ms = 1.6;
    CHECK(dflash::profile_mismatch(in) == doctest::Approx(0.25));
    CHECK(dflash::profile_idle_ms(in) == 0);
    // On the CPU (no gaps bound) the check is |kernels - measured| / measured and nothing is idle.
    in.idle_bound_ms = 0;
    in.measured_ms = 2.5;
    CHECK(dflash::profile_mismatch(in) == doctest::Approx(0.2));
    CHECK(dflash::profile_idle_ms(in) == 0);
    CHECK(dflash::format_profile_table("t", in).find("(no kernel running)") == std::string::npos);
  }

  TEST_CASE("the GPU check with a traced replay time: the kernels must account for the traced replay, not the untraced") {
    using dflash::ProfileTableInput;
    ProfileTableInput in;
    in.rows.resize(2);
    in.rows[0].ms = 1.5, in.rows[0].calls = 300;  // 400 kernels of 2 ms in all
    in.rows[1].ms = 0.5, in.rows[1].calls = 100;
    in.idle_bound_ms = 0.1;
    // Tracing lengthened every kernel: 1.85 ms untraced against 2.05 ms traced. Against the untraced
    // time the kernels would be 8 % too long; against the traced replay, which they come from, they fit.
    in.measured_ms = 1.85;
    in.traced_ms = 2.05;
    CHECK(dflash::profile_reference_ms(in) == 2.05);
    CHECK(dflash::profile_mismatch(in) == 0);
    CHECK(dflash::profile_idle_ms(in) == doctest::Approx(0.05));
    const std::string table = dflash::format_profile_table("t", in);
    CHECK(table.find("traced replay 2.050 ms") != std::string::npos);
    CHECK(table.find("untraced replay 1.850 ms (tracing adds 0.200 ms, 0.50 us a call)") != std::string::npos);
    CHECK(table.find("over the untraced time") != std::string::npos);
    // Records missing from the traced replay: it exceeds kernels + gaps by (2.5 - 2.1) / 2.5.
    in.traced_ms = 2.5;
    CHECK(dflash::profile_mismatch(in) == doctest::Approx(0.16));
    // Kernels longer than the traced replay they were recorded in: overlapping or misattributed records.
    in.traced_ms = 1.8;
    CHECK(dflash::profile_mismatch(in) == doctest::Approx(0.2 / 1.8));
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
}

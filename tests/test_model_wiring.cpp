// Wiring the other suites leave unchecked: the startup report's formatting and startup.json fields
// (graphs/startup_report.h, docs/USER_GUIDE.md), hidden-state shards written in parts by ranks and
// joined by write_hidden_index (data/shards.h), host conversions of tensors (runtime/tensor.h) and
// the decode ops' argument checks (runtime/decode_ops.h), a bucket step's partial-recompute cost
// (model/drafter.h) and the target-alone decode's reported logits and margins (model/spec_decoder.h);
// expected values are written by hand, or computed in double in the test from the target's full forward.
#include <cmath>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "data/shards.h"
#include "graphs/startup_report.h"
#include "model/drafter.h"
#include "model/spec_decoder.h"
#include "runtime/decode_ops.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "tests/target_fixtures.h"
#include "tests/test_util.h"
#include "train/bucket_step.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("model-wiring") {
  TEST_CASE("human_bytes: binary units from 1024 up, whole bytes below, two decimals above") {
    CHECK(human_bytes(0) == "0 B");
    CHECK(human_bytes(1023) == "1023 B");
    CHECK(human_bytes(1024) == "1.00 KiB");
    CHECK(human_bytes(1536) == "1.50 KiB");
    CHECK(human_bytes(size_t(1) << 20) == "1.00 MiB");
    CHECK(human_bytes((size_t(1) << 30) * 3 / 2) == "1.50 GiB");
    CHECK(human_bytes(size_t(1) << 40) == "1.00 TiB");
    CHECK(human_bytes((size_t(1) << 50)) == "1024.00 TiB");  // TiB is the largest unit
  }

  TEST_CASE("the startup report's recompute column and startup.json: F/L, F+Pp/L, and the counts as recorded") {
    ProgramReport none;
    none.name = "update";
    CHECK(recompute_label(none) == "-");  // no segments: no choice
    ProgramReport whole;
    whole.name = "train/64:4x2";
    whole.bucket = {64, 4, 2};
    whole.segments = 5, whole.recomputed = 4;
    CHECK(recompute_label(whole) == "4/5");
    ProgramReport part = whole;
    part.name = "train/128:8x1";
    part.bucket = {128, 8, 1};
    part.recomputed = 4, part.partially_recomputed = 1;  // 3 entirely, 1 in part
    CHECK(recompute_label(part) == "3+1p/5");
    part.recomputed = 2, part.partially_recomputed = 2;
    CHECK(recompute_label(part) == "0+2p/5");
    part.recomputed = 4, part.partially_recomputed = 1;

    StartupReport r;
    r.device = "cpu";
    r.workers = 2;
    r.arena_bytes = 2048;
    r.programs = {whole, part, none};
    const std::string table = format_startup_table(r);
    CHECK(table.find(" 4/5 ") != std::string::npos);
    CHECK(table.find(" 3+1p/5 ") != std::string::npos);
    CHECK(table.find("arena 2.00 KiB") != std::string::npos);

    const nlohmann::json j = startup_json(r);
    REQUIRE(j["programs"].size() == 3);
    REQUIRE(j["buckets"].size() == 2);  // the training programs only
    CHECK(j["buckets"][1]["seq"] == 128);
    CHECK(j["buckets"][1]["segments"] == 5);
    CHECK(j["buckets"][1]["recomputed_segments"] == 4);
    CHECK(j["buckets"][1]["partially_recomputed_segments"] == 1);
    CHECK(j["buckets"][0]["recomputed_segments"] == 4);
    CHECK(j["buckets"][0]["partially_recomputed_segments"] == 0);
    CHECK(j["programs"][2]["name"] == "update");
  }

  TEST_CASE("hidden shards in parts: each rank numbers from its first sequence; the index refuses parts out of order") {
    TempDir dir("wiring");
    const int64_t W = 2;
    const std::vector<float> rows0 = {1, 2, 3, 4}, rows1 = {5, 6}, rows2 = {-1, -2, -3, -4, -5, -6};
    // Rank 0 holds sequences 0 and 1, rank 1 sequence 2 (HiddenPart::first_sequence = 2).
    HiddenShardWriter w0(dir.path, W, HiddenDType::f32, int64_t(1) << 20, HiddenPart{0, 0});
    w0.append(rows0.data(), 2);
    w0.append(rows1.data(), 1);
    w0.finish();
    HiddenShardWriter w1(dir.path, W, HiddenDType::f32, int64_t(1) << 20, HiddenPart{1, 2});
    w1.append(rows2.data(), 3);
    w1.finish();
    CHECK_FALSE(std::filesystem::exists(dir.path / "index.json"));  // a part writes no index
    const nlohmann::json p1 = nlohmann::json::parse(w1.shards_json());
    REQUIRE(p1.size() == 1);
    CHECK(p1[0]["first_sequence"] == 2);
    CHECK(p1[0]["sequences"] == 1);
    CHECK_ERROR(write_hidden_index(dir.path, W, HiddenDType::f32, {w1.shards_json(), w0.shards_json()}),
                "starts at sequence 2, expected 0 (the ranks' parts do not follow each other)");
    write_hidden_index(dir.path, W, HiddenDType::f32, {w0.shards_json(), w1.shards_json()});
    HiddenDataset h(dir.path, W, HiddenDType::f32, {2, 1, 3});
    REQUIRE(h.size() == 3);
    CHECK(h.get(0) == rows0);
    CHECK(h.get(1) == rows1);
    CHECK(h.get(2) == rows2);
  }

  TEST_CASE("tensor host conversions: u8 values above 127 stay positive; item() of a bf16 scalar; a frozen leaf has no grad") {
    CpuRuntime rt;
    const uint8_t bytes[3] = {0, 200, 255};
    CHECK(Tensor::from_host({3}, DType::u8, bytes).to_ints() == std::vector<int32_t>{0, 200, 255});
    const uint16_t half = f32_to_bf16(-2.5f);
    CHECK(Tensor::from_host({1}, DType::bf16, &half).item() == -2.5f);
    CHECK(Tensor::from_ints({1}, {-7}).item() == -7.0f);
    Tensor w = Tensor::from_floats({2}, {1.0f, 2.0f});
    w.set_requires_grad(true);
    CHECK(w.grad().defined());
    w.set_requires_grad(false);
    CHECK_FALSE(w.requires_grad());
    CHECK_FALSE(w.grad().defined());
  }

  TEST_CASE("decode ops refuse a device scalar of several elements, rows of another size and an attention scale of 0") {
    CpuRuntime rt;
    Tensor dst = Tensor::zeros({4, 2}, DType::f32), src = Tensor::from_floats({2, 2}, {1, 2, 3, 4});
    CHECK_ERROR(ops::copy_rows_(dst, Tensor::from_ints({2}, {0, 1}), src, Tensor(), 2, Tensor()),
                "copy_rows: dst_at is i32[2] but must hold one i32 (shape [1])");
    CHECK_ERROR(ops::arange_from(Tensor::from_ints({1, 2}, {3, 4}), 2), "base is i32[1,2] but must hold one i32");
    CHECK_ERROR(ops::copy_rows_(dst, Tensor(), Tensor::from_floats({2, 3}, {1, 2, 3, 4, 5, 6}), Tensor(), 1, Tensor()),
                "copy_rows: the rows of dst f32[4,2] and src f32[2,3] differ in size");
    ops::copy_rows_(dst, Tensor::from_ints({1}, {1}), src, Tensor(), 2, Tensor());
    CHECK(dst.to_floats() == std::vector<float>{0, 0, 1, 2, 3, 4, 0, 0});
    Tensor q = Tensor::from_floats({1, 1, 2}, {1, 0}), kc = Tensor::from_floats({2, 1, 2}, {1, 0, 0, 1});
    Tensor pos = Tensor::from_ints({1}, {1});
    CHECK_ERROR(ops::cached_attention(q, kc, kc, pos, 0.0f), "scale = 0; it must be finite and > 0");
    // Scale 1: scores 1 and 0 over both cache rows, so out = (e, 1) / (e + 1).
    const std::vector<float> out = ops::cached_attention(q, kc, kc, pos, 1.0f).to_floats();
    const double e = std::exp(1.0);
    CHECK(out[0] == doctest::Approx(e / (e + 1)).epsilon(1e-6));
    CHECK(out[1] == doctest::Approx(1 / (e + 1)).epsilon(1e-6));
  }

  TEST_CASE("a bucket step's partial-recompute cost: q, k, v against q, k, v, o, gate, up at S context and N*bs block rows") {
    CpuRuntime rt;
    const DrafterSpec s = golden_drafter_spec();  // H 64, I 128, 4 heads and 2 kv heads of 16, bs 4
    Tensor embed = Tensor::persistent({s.vocab_size, s.hidden_size}, DType::f32, "embed");
    Drafter drafter(s, embed, embed);
    BucketStep step(drafter, nullptr, Bucket{32, 3, 1}, 0);
    // Multiply-adds per layer with S = 32 context rows and T = 3 * 4 = 12 block rows.
    const double S = 32, T = 12, H = 64, I = 128, q = 4 * 16, kv = 2 * 16;
    const double kept = T * H * q + 2 * (S + T) * H * kv, rest = T * q * H + 2 * T * H * I;
    CHECK(step.partial_recompute_cost() == doctest::Approx(kept / (kept + rest)).epsilon(1e-12));
    CHECK(step.layers() == 2);
  }

  TEST_CASE("the target alone reports each new token's logit and top-2 margin: those of its full forward") {
    CpuRuntime rt;
    Target target(golden_dir() / "target-qwen3", {1, 2}, 64);
    SpecDecoderOptions o;
    o.max_len = 44;
    o.prefill_chunk = 8;
    SpecDecoder decoder(Device::cpu(), target, nullptr, o);
    const std::vector<int32_t> prompt = random_ids(11, 320, 7);
    const size_t n = prompt.size(), new_tokens = 12;
    const Decoded d = decoder.decode(prompt, int64_t(new_tokens), {}, false);
    REQUIRE(d.output.size() == n + new_tokens);
    REQUIRE(d.margins.size() == new_tokens);
    REQUIRE(d.logits.size() == new_tokens);
    // New token k (the prefill's for k = 0, a step's after) is the argmax of the full forward's row n - 1 + k.
    const int64_t L = int64_t(d.output.size()) - 1, V = 320;
    const std::vector<float> logits =
        target.logits(Tensor::from_ints({1, L}, std::vector<int32_t>(d.output.begin(), d.output.end() - 1))).to_floats();
    for (size_t k = 0; k < new_tokens; ++k) {
      CAPTURE(k);
      const float* row = logits.data() + (n - 1 + k) * size_t(V);
      int64_t best = 0;
      for (int64_t v = 1; v < V; ++v) best = row[v] > row[best] ? v : best;
      double second = -INFINITY;
      for (int64_t v = 0; v < V; ++v) second = v != best ? std::max(second, double(row[v])) : second;
      const double top = row[best], tol = 1e-4 * std::max(1.0, std::fabs(top));
      CHECK(d.output[n + k] == best);
      CHECK(std::fabs(d.logits[k] - top) <= tol);
      CHECK(std::fabs(d.margins[k] - (top - second)) <= tol);
      CHECK(top - second > 10 * tol);  // a clear argmax, so the chosen token is not a near tie
    }
  }
}

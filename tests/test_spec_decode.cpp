// Greedy speculative decoding on the CPU against the float64 golden case (tests/golden/dflash-spec):
// every prompt's output, every round's drafts and acceptance lengths, the first round's drafter
// logits, the stop-token example; the target-alone baseline (which stops at a stop id too; its logits
// and margins against its full forward); the lossless check's reported position, margin and logit;
// the prompt-length and capacity bounds; the decode ops' refusals; recorded programs against eager.
#include <sstream>

#include "model/spec_ops.h"
#include "runtime/decode_ops.h"
#include "runtime/safetensors.h"
#include "tests/spec_test_util.h"
#include "tests/target_fixtures.h"
#include "train/spec_eval.h"

using namespace dflash;
using namespace dflash::test;

namespace {
SpecDecoderOptions golden_options(bool graphs, int64_t chunk) {
  SpecDecoderOptions o;
  o.max_len = 44;
  o.prefill_chunk = chunk;
  o.graphs = graphs;
  o.draft_logits = true;
  return o;
}

// The rounds that run and what each produced are the reference package's; a round whose block
// fits the budget (start + bs <= n + max_new) also has expected.json's start, drafts and a + 1.
// A shortened last block drafts L - 1 tokens.
void check_rounds(const std::vector<SpecRound>& got, const GoldenSpecCase& want, int64_t end, int64_t bs) {
  REQUIRE(got.size() == want.produced.size());
  for (size_t r = 0; r < got.size(); ++r) {
    INFO("round " << r);
    CHECK(got[r].produced == want.produced[r]);
    CHECK(got[r].start == want.rounds[r].start);
    CHECK(int64_t(got[r].draft.size()) == std::min(bs, end - got[r].start) - 1);
    if (got[r].start + bs <= end) {
      CHECK(got[r].draft == want.rounds[r].draft);
      CHECK(got[r].accepted == want.rounds[r].accepted);
    }
  }
}
}  // namespace

TEST_SUITE("spec") {
  TEST_CASE("the golden case: outputs, rounds, drafts, acceptance lengths and first-round logits") {
    CpuRuntime rt;
    GoldenSpec g = read_golden_spec();
    SafeTensors logits(golden_spec_dir() / "expected_logits.safetensors");
    for (int64_t chunk : {64, 3}) {  // one prefill program, and a prompt split over two chunks
      GoldenSpecModels m(Device::cpu(), golden_options(true, chunk));
      for (size_t i = 0; i < g.cases.size(); ++i) {
        INFO("prompt " << i << ", prefill chunk " << chunk);
        const GoldenSpecCase& c = g.cases[i];
        Decoded spec = m.decoder->decode(c.prompt, g.max_new, {}, true);
        CHECK(spec.output == c.output);
        check_rounds(spec.rounds, c, int64_t(c.prompt.size()) + g.max_new, 4);
        double tau = 0;
        for (const SpecRound& r : spec.rounds) tau += double(r.produced);
        CHECK(tau / double(spec.rounds.size()) == doctest::Approx(c.tau).epsilon(1e-12));
        std::vector<float> want = logits.read_floats("case" + std::to_string(i) + ".first_round_logits");
        CHECK(rel_err(spec.first_logits, want) <= 1e-4);
        Decoded alone = m.decoder->decode(c.prompt, g.max_new, {}, false);
        CHECK(alone.output == c.output);
        CHECK(alone.margins.size() == size_t(g.max_new));
      }
    }
  }

  TEST_CASE("the golden stop-token example: stop id 284 ends prompt 0 after one round") {
    CpuRuntime rt;
    GoldenSpec g = read_golden_spec();
    GoldenSpecModels m(Device::cpu(), golden_options(true, 64));
    const std::vector<int32_t>& prompt = g.cases[0].prompt;
    std::vector<int32_t> want = prompt;
    want.insert(want.end(), {3, 284});
    Decoded spec = m.decoder->decode(prompt, g.max_new, {284}, true);
    CHECK(spec.output == want);
    REQUIRE(spec.rounds.size() == 1);
    CHECK(spec.rounds[0].draft == std::vector<int32_t>{3, 3, 3});
    CHECK(spec.rounds[0].accepted == 1);
    // The target alone stops there too: the prefill commits 3, one step pass gives 284, and no pass
    // runs after it (a baseline that ran on to max_new would overstate the speedup).
    Decoded alone = m.decoder->decode(prompt, g.max_new, {284}, false);
    CHECK(alone.output == want);
    CHECK(alone.passes == 1);
    CHECK(alone.margins.size() == 2);
    CHECK(spec.passes == 1);
    // A stop token that is the prefill's own token ends decoding before any round.
    Decoded at_prefill = m.decoder->decode(prompt, g.max_new, {3}, true);
    CHECK(at_prefill.rounds.empty());
    CHECK(at_prefill.output == std::vector<int32_t>{51, 109, 295, 121, 3});
    CHECK(m.decoder->decode(prompt, g.max_new, {3}, false).output == at_prefill.output);
  }

  TEST_CASE("round_produced: a round's tokens, clipped to the budget and cut after the first stop id") {
    bool stopped = false;
    CHECK(round_produced({7, 8, 9, 10}, 9, {}, &stopped) == 4);
    CHECK_FALSE(stopped);
    CHECK(round_produced({7, 8, 9, 10}, 2, {8}, &stopped) == 2);  // the budget ends at the stop id
    CHECK(stopped);
    stopped = false;
    CHECK(round_produced({7, 8, 9, 10}, 2, {9}, &stopped) == 2);  // a stop id past the budget
    CHECK_FALSE(stopped);
    CHECK(round_produced({7, 8, 9, 8}, 9, {5, 8}, &stopped) == 2);  // an accepted draft, not the bonus
    CHECK(stopped);
    stopped = false;
    CHECK(round_produced({7, 8, 9, 10}, 9, {10}, &stopped) == 4);  // the bonus
    CHECK(stopped);
    stopped = false;
    CHECK(round_produced({7}, 0, {7}, &stopped) == 0);
    CHECK_FALSE(stopped);
  }

  TEST_CASE("the lossless check names the first differing position and the target's margin and logit there") {
    // A cache rolled back one position too far (the test hook) makes the outputs differ; the check
    // must report the first position where they differ, counted here, and the target-alone run's
    // margin and chosen logit at that new token (index = position - prompt length).
    CpuRuntime rt;
    GoldenSpec g = read_golden_spec();
    SpecDecoderOptions o = golden_options(true, 64);
    o.rollback_bias = 1;
    GoldenSpecModels m(Device::cpu(), o);
    int checked = 0;
    for (size_t c = 0; c < g.cases.size(); ++c) {
      CAPTURE(c);
      const std::vector<int32_t>& prompt = g.cases[c].prompt;
      const Decoded spec = m.decoder->decode(prompt, g.max_new, {}, true);
      const Decoded alone = m.decoder->decode(prompt, g.max_new, {}, false);
      REQUIRE(alone.output == g.cases[c].output);  // the target alone has no rollback
      size_t i = 0;
      while (i < spec.output.size() && i < alone.output.size() && spec.output[i] == alone.output[i]) ++i;
      if (i == spec.output.size() && i == alone.output.size()) continue;
      REQUIRE(i >= prompt.size());
      REQUIRE(i < alone.output.size());
      const size_t k = i - prompt.size();
      ++checked;
      try {
        SpecPromptResult r = measure_spec_prompt(*m.decoder, {prompt, "case"}, g.max_new, {}, true, false);
        CHECK(r.first_difference == int64_t(i));
        CHECK(r.margin == alone.margins[k]);
        CHECK(r.logit == alone.logits[k]);
      } catch (const Error& e) {
        const std::string text = e.what();
        INFO(text);
        CHECK(text.find("at position " + std::to_string(i) + " (new token " + std::to_string(k) + ")") != std::string::npos);
        std::ostringstream margin;
        margin << "top-2 logit margin there is " << alone.margins[k] << ",";
        CHECK(text.find(margin.str()) != std::string::npos);
      }
    }
    CHECK(checked > 0);
  }

  TEST_CASE("check_decode_prompt: prompt + max_new may reach max_position_embeddings and the capacity exactly") {
    const std::vector<int32_t> prompt = {1, 2, 3, 4, 5};
    CHECK_NOTHROW(check_decode_prompt(prompt, 3, 10, 100, 8, "d"));  // 5 + 3 = 8 positions: 0..7
    CHECK_THROWS_WITH_AS(check_decode_prompt(prompt, 4, 10, 100, 8, "d"),
                         doctest::Contains("= 9 positions, beyond the target's max_position_embeddings 8"), Error);
    CHECK_NOTHROW(check_decode_prompt(prompt, 3, 10, 8, 0, "d"));  // exactly the recorded capacity
    CHECK_THROWS_WITH_AS(check_decode_prompt(prompt, 4, 10, 8, 0, "d"),
                         doctest::Contains("= 9 positions, beyond the 8 the decoder's KV caches were recorded for"), Error);
  }

  TEST_CASE("eager passes give the recorded programs' tokens and logits bit for bit") {
    CpuRuntime rt;
    GoldenSpec g = read_golden_spec();
    GoldenSpecModels recorded(Device::cpu(), golden_options(true, 3)), eager(Device::cpu(), golden_options(false, 3));
    for (const GoldenSpecCase& c : g.cases) {
      Decoded a = recorded.decoder->decode(c.prompt, 20, {}, true), b = eager.decoder->decode(c.prompt, 20, {}, true);
      CHECK(a.output == b.output);
      CHECK(bitwise_equal(a.first_logits, b.first_logits));
      CHECK(recorded.decoder->decode(c.prompt, 20, {}, false).margins ==
            eager.decoder->decode(c.prompt, 20, {}, false).margins);
    }
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
}

TEST_SUITE("spec") {
  TEST_CASE("a random target (Target::random) with a random drafter decodes losslessly on the CPU, exactly") {
    CpuRuntime rt;
    TargetSpec t;
    t.hidden_size = 48, t.intermediate_size = 96, t.num_hidden_layers = 3, t.num_attention_heads = 6;
    t.num_key_value_heads = 2, t.head_dim = 8, t.vocab_size = 97, t.max_position_embeddings = 4096;
    DrafterSpec d;
    d.hidden_size = 48, d.intermediate_size = 64, d.num_hidden_layers = 2, d.num_attention_heads = 6;
    d.num_key_value_heads = 3, d.head_dim = 8, d.vocab_size = 97, d.block_size = 5, d.mask_token_id = 96;
    d.num_target_layers = 3, d.target_layer_ids = {0, 2};
    std::unique_ptr<Target> target = Target::random(t, d.target_layer_ids, 1, 21, 0.3);
    std::unique_ptr<Target> again = Target::random(t, d.target_layer_ids, 1, 21, 0.3);
    CHECK(bitwise_equal(target->lm_head().to_floats(), again->lm_head().to_floats()));
    CHECK_FALSE(bitwise_equal(target->lm_head().to_floats(), Target::random(t, {0, 2}, 1, 22, 0.3)->lm_head().to_floats()));
    Drafter drafter(d, target->embed_tokens(), target->lm_head());
    drafter.init_random(4, 0.3);
    SpecDecoderOptions o;
    o.max_len = 200;
    o.prefill_chunk = 7;
    SpecDecoder decoder(Device::cpu(), *target, &drafter, o);
    std::mt19937_64 rng(3);
    int64_t rounds = 0;
    for (int p = 0; p < 6; ++p) {
      std::vector<int32_t> prompt(size_t(1 + rng() % 40));
      for (int32_t& id : prompt) id = int32_t(rng() % 96);
      // measure_spec_prompt throws on any difference from the target's own greedy decoding.
      SpecPromptResult r = measure_spec_prompt(decoder, {prompt, "random prompt " + std::to_string(p)}, 60,
                                               {int32_t(rng() % 96)}, true, true);
      CHECK(r.first_difference == -1);
      rounds += int64_t(r.accepted.size());
    }
    CHECK(rounds > 0);
    // The bench's timing entry points run on any position within the recorded capacity.
    decoder.set_position(120);
    decoder.replay_round();
    decoder.replay_draft();
    decoder.replay_step();
    CHECK_THROWS_WITH_AS(decoder.set_position(197), doctest::Contains("leaves no room for a block of 5"), Error);
  }
}

TEST_SUITE("spec") {
  TEST_CASE("the target over its KV cache, chunk by chunk with a rollback, equals its full forward") {
    CpuRuntime rt;
    Target target(golden_dir() / "target-qwen3", {1, 2}, 64);
    TargetDecoder dec(target, 48);
    std::vector<int32_t> ids = random_ids(30, 320, 5), junk = random_ids(10, 320, 6);
    const std::vector<float> want_f = target.features(Tensor::from_ints({1, 30}, ids)).to_floats();
    const std::vector<float> want_l = target.logits(Tensor::from_ints({1, 30}, ids)).to_floats();
    Tensor pos0 = Tensor::from_ints({1}, {0}), count = Tensor::from_ints({1}, {10});
    std::vector<float> got_f, got_l;
    auto chunk = [&](const std::vector<int32_t>& v, int32_t at, int32_t real) {
      pos0.copy_from_host(&at, 4);
      count.copy_from_host(&real, 4);
      std::vector<int32_t> padded = v;
      padded.resize(12, 0);  // a fixed chunk of 12 rows, `real` of them real
      TargetDecoder::Pass p = dec.pass(Tensor::from_ints({12}, padded), pos0, count, true);
      const std::vector<float> f = p.features.to_floats(), l = ops::linear_rowwise(p.hidden, target.lm_head()).to_floats();
      return std::make_pair(std::vector<float>(f.begin(), f.begin() + real * 128),
                            std::vector<float>(l.begin(), l.begin() + real * 320));
    };
    auto keep = [&](const std::pair<std::vector<float>, std::vector<float>>& r) {
      got_f.insert(got_f.end(), r.first.begin(), r.first.end());
      got_l.insert(got_l.end(), r.second.begin(), r.second.end());
    };
    keep(chunk({ids.begin(), ids.begin() + 10}, 0, 10));
    chunk(junk, 20, 10);  // stale rows past the length: never read by earlier positions
    chunk(junk, 10, 10);  // rejected positions 10..19, then the cache rolls back to 10
    keep(chunk({ids.begin() + 10, ids.begin() + 20}, 10, 10));
    keep(chunk({ids.begin() + 20, ids.begin() + 30}, 20, 10));
    CHECK(rel_err(got_f, want_f) <= 1e-5);
    CHECK(rel_err(got_l, want_l) <= 1e-5);
  }
}

TEST_SUITE("spec") {
  TEST_CASE("cached attention over several 64-key tiles equals a double-precision softmax, GQA and the cap at C") {
    CpuRuntime rt;
    const int64_t n = 3, nh = 4, nkv = 2, hd = 8, C = 200;
    const int32_t base = 150;  // rows see 151, 152 and 153 keys: three tiles, the last one partial
    const float scale = 0.35f;
    std::vector<float> q = random_floats(size_t(n * nh * hd), 1), k = random_floats(size_t(C * nkv * hd), 2),
                       v = random_floats(size_t(C * nkv * hd), 3);
    // Later keys lean towards the queries, so each new tile raises the running max.
    for (int64_t j = 0; j < C; ++j)
      for (int64_t g = 0; g < nkv; ++g)
        for (int64_t e = 0; e < hd; ++e) k[size_t((j * nkv + g) * hd + e)] += 4.0f * float(j) / float(C) * q[size_t(g * 2 * hd + e)];
    for (const int32_t at : {base, int32_t(C - 2)}) {  // the second: rows past C - 1 see the whole cache
      CAPTURE(at);
      const std::vector<float> got =
          ops::cached_attention(Tensor::from_floats({n, nh, hd}, q), Tensor::from_floats({C, nkv, hd}, k),
                                Tensor::from_floats({C, nkv, hd}, v), Tensor::from_ints({1}, {at}), scale)
              .to_floats();
      std::vector<float> want(got.size());
      for (int64_t i = 0; i < n; ++i)
        for (int64_t h = 0; h < nh; ++h) {
          const int64_t g = h / (nh / nkv), last = std::min<int64_t>(at + i, C - 1);
          std::vector<double> s(size_t(last + 1));
          double mx = -1e300, sum = 0;
          for (int64_t j = 0; j <= last; ++j) {
            double d = 0;
            for (int64_t e = 0; e < hd; ++e) d += double(q[size_t((i * nh + h) * hd + e)]) * k[size_t((j * nkv + g) * hd + e)];
            s[size_t(j)] = double(scale) * d;
            mx = std::max(mx, s[size_t(j)]);
          }
          for (double& x : s) sum += (x = std::exp(x - mx));
          for (int64_t e = 0; e < hd; ++e) {
            double o = 0;
            for (int64_t j = 0; j <= last; ++j) o += s[size_t(j)] * v[size_t((j * nkv + g) * hd + e)];
            want[size_t((i * nh + h) * hd + e)] = float(o / sum);
          }
        }
      CHECK(rel_err(got, want) <= 1e-5);
    }
  }

  TEST_CASE("argmax_rows: the first maximum, its value, and the margin to the largest other entry") {
    CpuRuntime rt;
    const ops::ArgmaxRows r = ops::argmax_rows(Tensor::from_floats({3, 4}, {1, 5, 2, 4.5f,    //
                                                                            -3, -1, -2, -7,   //
                                                                            2, 0, 2, 1}));
    CHECK(r.index.to_ints() == std::vector<int32_t>{1, 1, 0});
    CHECK(r.top.to_floats() == std::vector<float>{5, -1, 2});
    CHECK(r.margin.to_floats() == std::vector<float>{0.5f, 1, 0});  // a repeated maximum: margin 0
  }

  TEST_CASE("spec_accept refuses a result without room for the round's header") {
    CpuRuntime rt;
    const int64_t bs = 4;
    Tensor state = Tensor::zeros({spec::kSpecStateFields}, DType::i32), block = Tensor::zeros({bs}, DType::i32),
           p = Tensor::zeros({bs}, DType::i32);
    const std::string refusal = "spec_accept: result is i32[4] but must hold " +
                                std::to_string(spec::kSpecRoundHeader + bs) + " i32";
    CHECK_THROWS_WITH_AS(spec::accept(state, block, p, 0, Tensor::zeros({bs}, DType::i32)),
                         doctest::Contains(refusal.c_str()), Error);
    CHECK_NOTHROW(spec::accept(state, block, p, 0, Tensor::zeros({spec::kSpecRoundHeader + bs}, DType::i32)));
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
}

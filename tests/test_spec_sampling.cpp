// Sampled speculative decoding on the CPU: the sampling distribution against an independent sort
// (z-lab's rule), top_k 1 equal to greedy decoding on the golden case, and a chi-square test that
// the first two new tokens follow the target's own sampling distribution, a test that fails for a
// sampler that accepts drafts without the rejection step.
#include "model/spec_ops.h"
#include "tests/spec_sampling_util.h"
#include "tests/spec_test_util.h"
#include "train/spec_eval.h"

using namespace dflash;
using namespace dflash::test;

namespace {
SpecDecoderOptions sampled_options(float T, float top_p, int64_t top_k) {
  SpecDecoderOptions o;
  o.max_len = 44;
  o.prefill_chunk = 64;
  o.temperature = T;
  o.top_p = top_p;
  o.top_k = top_k;
  return o;
}

// Counts of the first two new tokens over n sampled decodes of `prompt` (streams 0..n-1 of seed 7).
std::map<std::pair<int32_t, int32_t>, int64_t> pair_counts(SpecDecoder& decoder, const std::vector<int32_t>& prompt,
                                                           int64_t n, bool with_drafter) {
  std::map<std::pair<int32_t, int32_t>, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    Decoded d = decoder.decode(prompt, 2, {}, with_drafter, spec_sample_key(7, size_t(i)));
    REQUIRE(d.output.size() == prompt.size() + 2);
    ++counts[{d.output[prompt.size()], d.output[prompt.size() + 1]}];
  }
  return counts;
}
}  // namespace

TEST_SUITE("spec-sampling") {
  TEST_CASE("sampling_probs: temperature, top_k and top_p as an independent sort computes them") {
    CpuRuntime rt;
    const int64_t V = 97;
    std::vector<float> logits = random_floats(size_t(3 * V), 5, 2.0f);
    struct Case {
      float T, top_p;
      int64_t top_k;
    };
    for (Case c : {Case{1.0f, 1.0f, 0}, Case{0.7f, 1.0f, 5}, Case{1.3f, 0.8f, 0}, Case{0.5f, 0.9f, 20},
                   Case{2.0f, 0.3f, 1000}, Case{1.0f, 1.0f, 1}}) {
      CAPTURE(c.T);
      CAPTURE(c.top_p);
      CAPTURE(c.top_k);
      spec::SamplingParams s;
      s.temperature = c.T, s.top_p = c.top_p, s.top_k = c.top_k;
      std::vector<float> got = spec::sampling_probs(Tensor::from_floats({3, V}, logits), s).to_floats();
      for (int64_t r = 0; r < 3; ++r) {
        std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
        std::vector<double> want = reference_sampling_probs(row, c.T, c.top_p, c.top_k);
        for (int64_t j = 0; j < V; ++j) {
          CHECK((want[size_t(j)] == 0) == (got[size_t(r * V + j)] == 0));
          CHECK(got[size_t(r * V + j)] == doctest::Approx(want[size_t(j)]).epsilon(1e-5));
        }
      }
    }
  }

  TEST_CASE("top_k 1 samples exactly what greedy decoding chooses, rounds included") {
    CpuRuntime rt;
    GoldenSpec g = read_golden_spec();
    GoldenSpecModels m(Device::cpu(), sampled_options(1.3f, 1.0f, 1));
    for (size_t i = 0; i < g.cases.size(); ++i) {
      CAPTURE(i);
      const GoldenSpecCase& c = g.cases[i];
      Decoded d = m.decoder->decode(c.prompt, g.max_new, {}, true, spec_sample_key(3, i));
      CHECK(d.output == c.output);
      REQUIRE(d.rounds.size() == c.produced.size());
      for (size_t r = 0; r < d.rounds.size(); ++r) CHECK(d.rounds[r].produced == c.produced[r]);
      CHECK(m.decoder->decode(c.prompt, g.max_new, {}, false, spec_sample_key(3, i)).output == c.output);
    }
  }

  TEST_CASE("the first two new tokens follow the target's own sampling distribution (chi-square, 0.001)") {
    // 3000 decodes of golden prompt 1 with max_new 2: the prefill draws the first token, one round
    // (a block shortened to 2 slots: one draft) gives the second. The expected distribution comes
    // from the target's full forward; a sampler that keeps every draft follows the drafter instead.
    CpuRuntime rt;
    GoldenSpec g = read_golden_spec();
    const std::vector<int32_t>& prompt = g.cases[1].prompt;
    const float T = 1.5f, top_p = 0.95f;
    const int64_t top_k = 3, n = 3000;
    SpecDecoderOptions o = sampled_options(T, top_p, top_k);
    GoldenSpecModels m(Device::cpu(), o);
    const auto dist = target_pair_distribution(*m.target, prompt, T, top_p, top_k);
    REQUIRE(dist.size() >= 4);
    const double critical = chi_square_critical_001(int64_t(dist.size()) - 1);
    const double with_drafter = chi_square(pair_counts(*m.decoder, prompt, n, true), dist, n);
    const double alone = chi_square(pair_counts(*m.decoder, prompt, n, false), dist, n);
    MESSAGE("chi-square over " << dist.size() << " pairs: " << with_drafter << " with the drafter, " << alone
                               << " by the target alone; critical " << critical);
    CHECK(with_drafter < critical);
    CHECK(alone < critical);
    o.accept_all_drafts = true;
    GoldenSpecModels wrong(Device::cpu(), o);
    const double skipped = chi_square(pair_counts(*wrong.decoder, prompt, n, true), dist, n);
    MESSAGE("without the rejection step: " << skipped);
    CHECK(skipped > critical);
  }
}

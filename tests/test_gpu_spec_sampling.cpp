// Sampled speculative decoding on a GPU, suite "gpu-spec": the sampling distribution's kernel
// against an independent sort at a real vocabulary, top_k 1 equal to the GPU's own greedy decoding
// (golden case, and a random target at Qwen3-8B dims with block 16, whose last blocks are
// shortened), and the chi-square test of the first two new tokens against the target's own
// sampling distribution (computed on the CPU in f32), which the sampler without rejection fails.
#ifdef DFLASH_CUDA
#include "model/spec_ops.h"
#include "tests/gpu_test_util.h"
#include "tests/spec_sampling_util.h"
#include "tests/spec_test_util.h"
#include "train/spec_eval.h"

using namespace dflash;
using namespace dflash::test;

namespace {
std::map<std::pair<int32_t, int32_t>, int64_t> gpu_pair_counts(SpecDecoder& decoder, const std::vector<int32_t>& prompt,
                                                               int64_t n, bool with_drafter) {
  std::map<std::pair<int32_t, int32_t>, int64_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    Decoded d = decoder.decode(prompt, 2, {}, with_drafter, spec_sample_key(11, size_t(i)));
    REQUIRE(d.output.size() == prompt.size() + 2);
    ++counts[{d.output[prompt.size()], d.output[prompt.size() + 1]}];
  }
  return counts;
}
}  // namespace

TEST_SUITE("gpu-spec") {
  TEST_CASE("sampling_probs on the GPU: temperature, top_k and top_p as an independent sort computes them") {
    REQUIRE_GPU();
    Context ctx(Device::cuda(0));
    ContextScope scope(ctx);
    for (int64_t V : {97, 151936}) {
      std::vector<float> logits = random_floats(size_t(2 * V), 13, 3.0f);
      for (auto [T, top_p, top_k] : {std::tuple{1.0f, 1.0f, int64_t(0)}, std::tuple{0.7f, 0.9f, int64_t(50)},
                                     std::tuple{1.3f, 0.5f, int64_t(0)}, std::tuple{1.0f, 1.0f, int64_t(1)}}) {
        CAPTURE(V);
        CAPTURE(T);
        CAPTURE(top_p);
        CAPTURE(top_k);
        spec::SamplingParams s;
        s.temperature = T, s.top_p = top_p, s.top_k = top_k;
        std::vector<float> got = spec::sampling_probs(Tensor::from_floats({2, V}, logits), s).to_floats();
        int64_t wrong = 0;
        double worst = 0;
        for (int64_t r = 0; r < 2; ++r) {
          std::vector<float> row(logits.begin() + r * V, logits.begin() + (r + 1) * V);
          std::vector<double> want = reference_sampling_probs(row, T, top_p, top_k);
          for (int64_t j = 0; j < V; ++j) {
            const double g = got[size_t(r * V + j)], w = want[size_t(j)];
            wrong += (w == 0) != (g == 0);
            worst = std::max(worst, std::fabs(g - w) / std::max(w, 1e-30));
          }
        }
        CHECK(wrong == 0);
        CHECK(worst <= 1e-3);
      }
    }
  }

  TEST_CASE("top_k 1 on the GPU samples exactly the GPU's greedy tokens") {
    REQUIRE_GPU();
    Context ctx(Device::cuda(0));
    ContextScope scope(ctx);
    GoldenSpec g = read_golden_spec();
    SpecDecoderOptions greedy;
    greedy.max_len = 44;
    greedy.prefill_chunk = 3;
    SpecDecoderOptions top1 = greedy;
    top1.temperature = 0.8f, top1.top_k = 1;
    GoldenSpecModels a(Device::cuda(0), greedy), b(Device::cuda(0), top1);
    for (size_t i = 0; i < g.cases.size(); ++i) {
      CAPTURE(i);
      const GoldenSpecCase& c = g.cases[i];
      Decoded want = a.decoder->decode(c.prompt, g.max_new, {}, true);
      Decoded got = b.decoder->decode(c.prompt, g.max_new, {}, true, spec_sample_key(1, i));
      CHECK(got.output == want.output);
      CHECK(got.rounds.size() == want.rounds.size());
    }
  }

  TEST_CASE("sampled decoding at Qwen3-8B dims (block 16): top_k 1 is greedy, and sampled runs repeat per seed") {
    REQUIRE_GPU();
    Context ctx(Device::cuda(0));
    ContextScope scope(ctx);
    RandomQwen3_8B m;
    const Target* target = m.target.get();
    const Drafter& drafter = *m.drafter;
    SpecDecoderOptions o;
    o.max_len = 400;
    o.prefill_chunk = 128;
    SpecDecoder greedy(Device::cuda(0), *target, &drafter, o);
    o.temperature = 0.9f, o.top_k = 1;
    SpecDecoder top1(Device::cuda(0), *target, &drafter, o);
    o.top_k = 40, o.top_p = 0.95f;
    SpecDecoder sampled(Device::cuda(0), *target, &drafter, o);
    std::vector<int32_t> prompt(300);
    std::mt19937_64 rng(4);
    for (int32_t& id : prompt) id = int32_t(rng() % 151000);
    CHECK(top1.decode(prompt, 53, {}, true, 5).output == greedy.decode(prompt, 53, {}, true).output);
    Decoded one = sampled.decode(prompt, 53, {}, true, 5), again = sampled.decode(prompt, 53, {}, true, 5);
    CHECK(one.output == again.output);
    CHECK(one.output.size() == prompt.size() + 53);
    int64_t produced = 0;
    for (const SpecRound& r : one.rounds) produced += r.produced;
    CHECK(produced == 52);
    CHECK(sampled.decode(prompt, 53, {}, true, 6).output != one.output);
  }

  TEST_CASE("the first two new tokens on the GPU follow the target's own sampling distribution (chi-square, 0.001)") {
    REQUIRE_GPU();
    GoldenSpec g = read_golden_spec();
    const std::vector<int32_t>& prompt = g.cases[1].prompt;
    const float T = 1.5f, top_p = 0.95f;
    const int64_t top_k = 3, n = 3000;
    std::map<std::pair<int32_t, int32_t>, double> dist;
    {
      CpuRuntime rt;
      SpecDecoderOptions cpu;
      cpu.max_len = 44;
      GoldenSpecModels m(Device::cpu(), cpu);
      dist = target_pair_distribution(*m.target, prompt, T, top_p, top_k);
    }
    Context ctx(Device::cuda(0));
    ContextScope scope(ctx);
    SpecDecoderOptions o;
    o.max_len = 44;
    o.temperature = T, o.top_p = top_p, o.top_k = top_k;
    GoldenSpecModels m(Device::cuda(0), o);
    const double critical = chi_square_critical_001(int64_t(dist.size()) - 1);
    const double with_drafter = chi_square(gpu_pair_counts(*m.decoder, prompt, n, true), dist, n);
    const double alone = chi_square(gpu_pair_counts(*m.decoder, prompt, n, false), dist, n);
    o.accept_all_drafts = true;
    GoldenSpecModels wrong(Device::cuda(0), o);
    const double skipped = chi_square(gpu_pair_counts(*wrong.decoder, prompt, n, true), dist, n);
    MESSAGE("GPU chi-square over " << dist.size() << " pairs: " << with_drafter << " with the drafter, " << alone
                                   << " alone, " << skipped << " without the rejection step; critical " << critical);
    CHECK(with_drafter < critical);
    CHECK(alone < critical);
    CHECK(skipped > critical);
  }
}
#endif

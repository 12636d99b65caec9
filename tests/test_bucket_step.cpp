// A bucket step (train/bucket_step.h): its result's tau and accuracy from the metric sums, and the share of
// a layer's GEMM work that partial recomputation redoes at its shapes, against the formula written out here.
#include "model/drafter.h"
#include "tests/test_util.h"
#include "train/bucket_step.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("bucket-step") {
  TEST_CASE("a step result's tau is 0 without blocks; accuracy is correct over predicted") {
    StepResult r;
    CHECK(r.tau() == 0.0);
    r.sums[4] = 6, r.sums[5] = 2;
    CHECK(r.tau() == 3.0);
    r.sums[2] = 3, r.sums[3] = 4;
    CHECK(r.accuracy() == doctest::Approx(0.75).epsilon(1e-5));
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
}

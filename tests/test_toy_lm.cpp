// The toy model against references written by hand: a staged batch trains each token on the next
// one, and a layer whose MLP outputs zero passes its input through (the residual stream).
#include <cmath>

#include "model/toy_lm.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {
// ToyLM::loss of one batch written out directly (not through ToyStep::stage).
float direct_loss(const ToyLM& model, const Shape& s, const std::vector<int32_t>& ids,
                  const std::vector<int32_t>& labels, const std::vector<float>& weights) {
  NoGrad no_grad;
  ToyLM::Loss l = model.loss(Tensor::from_ints(s, ids), Tensor::from_ints(s, labels), Tensor::from_floats(s, weights),
                             false);
  return l.loss.to_floats()[0];
}
}  // namespace

TEST_SUITE("toy") {
  TEST_CASE("ToyStep::stage: each token's label is the next token, weight 1 where one exists, padding 0") {
    CpuRuntime rt;
    ToyLM model(ToyConfig{});
    ToyStep step(model, Bucket{5, 1, 2});
    step.stage({{5, 17, 40, 2}, {9, 61, 61}});
    step.train(false);
    rt.ctx.synchronize();
    const float want = direct_loss(model, {2, 5}, {5, 17, 40, 2, 0, 9, 61, 61, 0, 0},
                                   {17, 40, 2, -1, -1, 61, 61, -1, -1, -1}, {1, 1, 1, 0, 0, 1, 1, 0, 0, 0});
    CHECK(step.loss() == doctest::Approx(want).epsilon(1e-6));
    // Labels equal to the ids (the current token) give another loss: the check above can tell.
    CHECK(want != doctest::Approx(direct_loss(model, {2, 5}, {5, 17, 40, 2, 0, 9, 61, 61, 0, 0},
                                              {5, 17, 40, -1, -1, 9, 61, -1, -1, -1}, {1, 1, 1, 0, 0, 1, 1, 0, 0, 0}))
                      .epsilon(1e-3));
  }

  TEST_CASE("layers whose down projections are zero leave the embedding unchanged: the loss of a model without layers") {
    CpuRuntime rt;
    ToyConfig two;  // the embedding and head are drawn first from the seed: the same in both models
    ToyConfig none = two;
    none.layers = 0;
    ToyLM deep(two), shallow(none);
    for (int64_t l = 0; l < two.layers; ++l) {
      const std::string name = "layers." + std::to_string(l) + ".down";
      std::vector<float> zeros(size_t(deep.params().master(name).numel()), 0.0f);
      deep.params().master(name).copy_from_host(zeros.data(), zeros.size() * sizeof(float));
    }
    deep.params().sync_compute_copy();
    const Shape s{1, 6};
    const std::vector<int32_t> ids = {3, 50, 7, 91, 12, 33}, labels = {50, 7, 91, 12, 33, -1};
    const std::vector<float> weights = {1, 1, 1, 1, 1, 0};
    const float want = direct_loss(shallow, s, ids, labels, weights);
    CHECK(direct_loss(deep, s, ids, labels, weights) == doctest::Approx(want).epsilon(1e-6));
    // All-zero hidden states would give uniform logits, a loss of log V: the check above can tell.
    CHECK(std::fabs(want - std::log(float(two.vocab))) > 1e-2f);
  }
}

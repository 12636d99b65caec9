// Buckets: validation messages, the choice of the smallest bucket that holds a sequence, and
// padding invariance of a sequence's loss across buckets.
#include "tests/test_util.h"
#include "train/toy_worker.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("buckets") {
  TEST_CASE("every bad bucket list is refused with a message naming the entry") {
    const std::string src = "configs/x.toml";
    CHECK_THROWS_WITH_AS(validate_buckets({}, 16, src), doctest::Contains("configs/x.toml: no [[buckets]] entries"),
                         Error);
    CHECK_THROWS_WITH_AS(validate_buckets({{64, 4, 1}, {64, 8, 2}}, 16, src),
                         doctest::Contains("[[buckets]] #2 {seq 64, anchors 8, batch 2}: another bucket already has seq 64"),
                         Error);
    CHECK_THROWS_WITH_AS(validate_buckets({{100, 4, 1}}, 16, src),
                         doctest::Contains("[[buckets]] #1 {seq 100, anchors 4, batch 1}: seq 100 is not a multiple of the block size 16; use 112"),
                         Error);
    CHECK_THROWS_WITH_AS(validate_buckets({{32, 18, 1}}, 16, src),
                         doctest::Contains("18 anchors, but a sequence of length 32 has at most 17 anchor positions"),
                         Error);
    CHECK_THROWS_WITH_AS(validate_buckets({{32, 4, 0}}, 16, src), doctest::Contains("#1 {seq 32, anchors 4, batch 0}: batch must be at least 1"),
                         Error);
    CHECK_THROWS_WITH_AS(validate_buckets({{32, 0, 1}}, 16, src), doctest::Contains("anchors must be at least 1"), Error);
    CHECK_THROWS_WITH_AS(validate_buckets({{8, 1, 1}}, 16, src), doctest::Contains("seq must be at least the block size 16"),
                         Error);
    CHECK_NOTHROW(validate_buckets({{64, 4, 2}, {32, 17, 1}, {1024, 128, 1}}, 16, src));
  }

  TEST_CASE("a sequence goes to the smallest bucket that holds it") {
    std::vector<Bucket> b = {{1024, 8, 1}, {256, 8, 4}, {512, 8, 2}};
    CHECK(smallest_bucket_for(b, 1) == 1);
    CHECK(smallest_bucket_for(b, 256) == 1);
    CHECK(smallest_bucket_for(b, 257) == 2);
    CHECK(smallest_bucket_for(b, 1000) == 0);
    CHECK(smallest_bucket_for(b, 1025) == -1);
  }

  TEST_CASE("overflow policies parse and name themselves; a bad one is refused") {
    CHECK(parse_overflow_policy("truncate", "data.overflow") == OverflowPolicy::truncate);
    CHECK(parse_overflow_policy("skip", "data.overflow") == OverflowPolicy::skip);
    CHECK(std::string(overflow_policy_name(parse_overflow_policy("error", "k"))) == "error");
    CHECK_THROWS_WITH_AS(parse_overflow_policy("drop", "data.overflow"),
                         doctest::Contains("data.overflow = \"drop\": use \"truncate\", \"skip\" or \"error\""), Error);
  }

  TEST_CASE("padding invariance: a sequence's loss is the same in every bucket that holds it") {
    std::vector<Bucket> buckets = {{32, 1, 1}, {64, 1, 2}, {128, 1, 3}};
    ToyReplica r(Device::cpu(), ToyConfig{}, buckets, OptimizerConfig{}, true, true);
    auto seq = toy_batch(99, 1, 30, 30, 96);
    std::vector<float> losses, grads0;
    for (size_t i = 0; i < buckets.size(); ++i) {
      {
        ContextScope scope(r.ctx);
        r.steps[i]->stage(seq);  // the other rows of larger batches stay empty (weight 0)
      }
      r.train(i);
      ContextScope scope(r.ctx);
      losses.push_back(r.steps[i]->loss());
      std::vector<float> g = r.grads();
      ops::fill_(r.model->params().flat_grads(), 0.0f);
      if (i == 0) grads0 = g;
      else CHECK(rel_err(g, grads0) < 1e-5);
    }
    CHECK(losses[1] == doctest::Approx(losses[0]).epsilon(1e-6));
    CHECK(losses[2] == doctest::Approx(losses[0]).epsilon(1e-6));
  }
}

// Data batching: the batch planner (determinism, every order reached, coverage, smallest buckets, an epoch's order and
// its end-of-epoch flush, overflow, resume) and anchors (validity, uniformity, eval passes) with
// the staging of a micro-batch.
#include <doctest/doctest.h>

#include <algorithm>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "data/anchors.h"
#include "data/data.h"
#include "runtime/error.h"
#include "tests/data_test_util.h"

using namespace dflash;
using namespace dflash::test;
using json = nlohmann::json;

namespace {

std::vector<int64_t> random_lengths(size_t n, uint64_t seed, int64_t lo, int64_t hi) {
  std::mt19937_64 rng(seed);
  std::vector<int64_t> out(n);
  for (int64_t& x : out) x = lo + int64_t(rng() % uint64_t(hi - lo + 1));
  return out;
}

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

}  // namespace

TEST_SUITE("data") {
  // ---- batch planner ----

  TEST_CASE("planner: same seed gives the same micro-batches, another seed or epoch another order") {
    std::vector<int64_t> lengths = random_lengths(200, 1, 1, 120);
    std::vector<Bucket> buckets = {{64, 2, 4}, {32, 2, 8}, {128, 2, 2}};
    BatchPlanner a(lengths, buckets, OverflowPolicy::truncate, 7), b(lengths, buckets, OverflowPolicy::truncate, 7);
    BatchPlanner c(lengths, buckets, OverflowPolicy::truncate, 8);
    bool differs = false;
    for (int i = 0; i < 300; ++i) {
      MicroBatch x = a.next(), y = b.next(), z = c.next();
      CHECK(x.bucket == y.bucket);
      CHECK(x.sequences == y.sequences);
      CHECK(x.epoch == y.epoch);
      CHECK(x.index == y.index);
      differs = differs || x.sequences != z.sequences;
    }
    CHECK(differs);
    CHECK(a.epoch() >= 2);
    CHECK(a.permutation(0) != a.permutation(1));
    CHECK(a.permutation(1) != c.permutation(0));
    // An independent Fisher-Yates in the test: mt19937_64 output is fixed by the standard.
    std::mt19937_64 rng(derive_seed(7, 3));
    std::vector<int64_t> p(lengths.size());
    for (size_t i = 0; i < p.size(); ++i) p[i] = int64_t(i);
    for (uint64_t i = p.size() - 1; i >= 1; --i) {
      uint64_t r, limit = UINT64_MAX - (UINT64_MAX % (i + 1) + 1) % (i + 1);  // largest accepted draw
      do r = rng(); while (r > limit && limit != UINT64_MAX);
      std::swap(p[i], p[r % (i + 1)]);
    }
    CHECK(p == a.permutation(3));
  }

  TEST_CASE("planner: each epoch covers every sequence once, in the smallest bucket that holds it") {
    std::vector<int64_t> lengths = random_lengths(150, 2, 1, 100);
    lengths[0] = 200, lengths[1] = 129;  // over the largest bucket: truncated
    std::vector<Bucket> buckets = {{128, 2, 3}, {32, 2, 5}, {64, 2, 4}};
    BatchPlanner planner(lengths, buckets, OverflowPolicy::truncate, 1);
    CHECK(planner.truncated() == 2);
    CHECK(planner.skipped() == 0);
    CHECK(planner.is_truncated(0));
    CHECK(!planner.is_truncated(2));
    for (int64_t epoch = 0; epoch < 3; ++epoch) {
      std::map<int64_t, int> seen;
      std::vector<int> partial(3, 0);
      MicroBatch mb;
      PlannerState st;
      do {
        mb = planner.next();
        CHECK(mb.epoch == epoch);
        const Bucket& bk = buckets[size_t(mb.bucket)];
        REQUIRE(!mb.sequences.empty());
        CHECK(int64_t(mb.sequences.size()) <= bk.batch);
        if (int64_t(mb.sequences.size()) < bk.batch) ++partial[size_t(mb.bucket)];
        for (int64_t s : mb.sequences) {
          ++seen[s];
          int64_t fits = -1;  // the smallest seq >= length, computed here
          for (const Bucket& x : buckets)
            if (x.seq >= lengths[size_t(s)] && (fits < 0 || x.seq < fits)) fits = x.seq;
          CHECK(bk.seq == (fits < 0 ? 128 : fits));
        }
        st = planner.state();
      } while (st.cursor < int64_t(lengths.size()) ||
               !std::all_of(st.pending.begin(), st.pending.end(), [](auto& g) { return g.empty(); }));
      CHECK(seen.size() == lengths.size());
      for (auto& [s, n] : seen) CHECK(n == 1);
      for (int n : partial) CHECK(n <= 1);
    }
  }

  TEST_CASE("planner: an epoch's micro-batches in order, its partial groups last in the buckets' list order") {
    // The documented rule, followed here by hand over the epoch's permutation (checked against an
    // independent Fisher-Yates above): a group is emitted when it fills; at the epoch's end the
    // partial groups follow in the order of the [[buckets]] list (not sorted by seq).
    std::vector<Bucket> buckets = {{64, 1, 4}, {16, 1, 3}, {32, 1, 5}};
    std::vector<int64_t> lengths;  // 6, 7 and 8 sequences: every bucket ends the epoch with a partial group
    for (int i = 0; i < 6; ++i) lengths.push_back(33 + 5 * i);
    for (int i = 0; i < 7; ++i) lengths.push_back(2 + 2 * i);
    for (int i = 0; i < 8; ++i) lengths.push_back(17 + 2 * i);
    BatchPlanner planner(lengths, buckets, OverflowPolicy::truncate, 4);
    std::vector<std::pair<int, std::vector<int64_t>>> want;
    std::vector<std::vector<int64_t>> groups(buckets.size());
    for (int64_t s : planner.permutation(0)) {
      const int b = lengths[size_t(s)] <= 16 ? 1 : lengths[size_t(s)] <= 32 ? 2 : 0;
      groups[size_t(b)].push_back(s);
      if (int64_t(groups[size_t(b)].size()) == buckets[size_t(b)].batch) {
        want.push_back({b, groups[size_t(b)]});
        groups[size_t(b)].clear();
      }
    }
    size_t partial = 0;
    for (int b = 0; b < 3; ++b)
      if (!groups[size_t(b)].empty()) want.push_back({b, groups[size_t(b)]}), ++partial;
    REQUIRE(partial == 3);  // the case exercises the order of the flush
    for (size_t i = 0; i < want.size(); ++i) {
      CAPTURE(i);
      MicroBatch mb = planner.next();
      CHECK(mb.epoch == 0);
      CHECK(mb.index == int64_t(i));
      CHECK(mb.bucket == want[i].first);
      CHECK(mb.sequences == want[i].second);
    }
    CHECK(planner.next().epoch == 1);
  }

  TEST_CASE("planner: overflow policies skip, truncate or refuse; nothing to train on is refused") {
    std::vector<Bucket> buckets = {{32, 1, 2}, {64, 1, 2}};
    std::vector<int64_t> lengths = {10, 70, 64, 65, 5};
    BatchPlanner skip(lengths, buckets, OverflowPolicy::skip, 0);
    CHECK(skip.skipped() == 2);
    CHECK(skip.truncated() == 0);
    CHECK(skip.bucket_of(1) == -1);
    std::multiset<int64_t> seen;
    for (int i = 0; i < 2; ++i)  // one full group of bucket 32, one partial of bucket 64
      for (int64_t s : skip.next().sequences) seen.insert(s);
    CHECK(skip.next().epoch == 1);
    CHECK(seen == std::multiset<int64_t>{0, 2, 4});
    BatchPlanner trunc(lengths, buckets, OverflowPolicy::truncate, 0);
    CHECK(trunc.truncated() == 2);
    CHECK(trunc.bucket_of(3) == 1);
    CHECK_ERROR(BatchPlanner(lengths, buckets, OverflowPolicy::error, 0, "train.jsonl"),
                "train.jsonl: sequence 1 has 70 tokens, more than the largest bucket (seq 64); fix: add a [[buckets]] entry with seq >= 70, or set data.overflow = \"truncate\" or \"skip\"");
    CHECK_ERROR(BatchPlanner({70, 80}, buckets, OverflowPolicy::skip, 0, "d"), "d: no sequence to train on (2 sequences, 2 skipped");
    CHECK_ERROR(BatchPlanner({}, buckets, OverflowPolicy::skip, 0, "d"), "d: no sequence to train on (0 sequences");
    CHECK_ERROR(BatchPlanner({1}, {}, OverflowPolicy::skip, 0, "d"), "d: the batch planner got no buckets");
  }

  TEST_CASE("planner: a state saved anywhere (mid-epoch, while flushing, at a boundary) resumes identically") {
    std::vector<int64_t> lengths = random_lengths(40, 3, 1, 64);
    std::vector<Bucket> buckets = {{16, 1, 3}, {64, 1, 4}, {32, 1, 2}};
    BatchPlanner reference(lengths, buckets, OverflowPolicy::truncate, 9);
    std::vector<MicroBatch> all;
    for (int i = 0; i < 80; ++i) all.push_back(reference.next());
    for (int k : {0, 1, 5, 13, 17, 18, 19, 20, 21, 22, 40, 61}) {
      CAPTURE(k);
      BatchPlanner first(lengths, buckets, OverflowPolicy::truncate, 9);
      for (int i = 0; i < k; ++i) first.next();
      const std::string saved = first.state().to_json().dump();
      BatchPlanner resumed(lengths, buckets, OverflowPolicy::truncate, 9);
      resumed.restore(PlannerState::from_json(json::parse(saved), "ckpt"));
      for (int i = k; i < 80; ++i) {
        MicroBatch mb = resumed.next();
        CHECK(mb.bucket == all[size_t(i)].bucket);
        CHECK(mb.sequences == all[size_t(i)].sequences);
        CHECK(mb.epoch == all[size_t(i)].epoch);
        CHECK(mb.index == all[size_t(i)].index);
      }
    }
    BatchPlanner p(lengths, buckets, OverflowPolicy::truncate, 9);
    p.next();
    PlannerState st = p.state();
    const std::string fix = "fix: resume with the data, buckets and data.shuffle_seed of the saved run";
    CHECK_ERROR(BatchPlanner(std::vector<int64_t>(41, 5), buckets, OverflowPolicy::truncate, 9, "d").restore(st),
                "d: the saved data position was made for 40 sequences, but the data have 41; " + fix);
    CHECK_ERROR(BatchPlanner(lengths, buckets, OverflowPolicy::truncate, 10, "d").restore(st),
                "d: the saved data position was made with shuffle seed 9, but data.shuffle_seed is 10");
    CHECK_ERROR(BatchPlanner(lengths, {{16, 1, 3}, {64, 1, 4}, {32, 1, 3}}, OverflowPolicy::truncate, 9, "d").restore(st),
                "made for buckets {seq 16, anchors 1, batch 3} {seq 64, anchors 1, batch 4} {seq 32, anchors 1, batch 2}, but the buckets are");
    PlannerState broken = st;
    broken.cursor = 41;
    CHECK_ERROR(p.restore(broken), "the saved data position is inconsistent (epoch 0, cursor 41");
    broken = st;
    broken.pending[0] = {0, 1, 2};
    CHECK_ERROR(p.restore(broken), "the saved data position is inconsistent");
    CHECK_ERROR(PlannerState::from_json(json{{"epoch", 1}}, "ckpt/data.json"), "ckpt/data.json: the saved data position is unreadable");
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

  // ---- anchors ----

  TEST_CASE("anchors: only valid positions, distinct, sorted, kept first; padding slots are 0/keep 0") {
    std::mt19937_64 rng(4);
    for (const Sequence& s : random_sequences(60, 8, 50, 1, 60)) {
      for (int64_t N : {1, 3, 8, 40}) {
        std::vector<int32_t> valid;  // computed here from the definition
        for (int64_t p = 0; p + 16 <= s.length(); ++p)
          if (s.loss_mask[size_t(p)]) valid.push_back(int32_t(p));
        CHECK(valid_anchor_positions(s, 16) == valid);
        AnchorSet a = sample_anchors(s, N, 16, rng);
        REQUIRE(int64_t(a.anchors.size()) == N);
        REQUIRE(int64_t(a.keep.size()) == N);
        const size_t k = std::min(size_t(N), valid.size());
        for (size_t j = 0; j < size_t(N); ++j) {
          CHECK(a.keep[j] == (j < k ? 1 : 0));
          if (j >= k) CHECK(a.anchors[j] == 0);
          if (j < k) CHECK(std::binary_search(valid.begin(), valid.end(), a.anchors[j]));
          if (j > 0 && j < k) CHECK(a.anchors[j - 1] < a.anchors[j]);
        }
      }
    }
    AnchorSet none = sample_anchors(seq({1, 2, 3}, {1, 1, 1}), 4, 16, rng);  // shorter than a block
    CHECK(none.keep == std::vector<uint8_t>(4, 0));
    CHECK(none.anchors == std::vector<int32_t>(4, 0));
    Sequence exact = seq(std::vector<int32_t>(16, 3), std::vector<uint8_t>(16, 1));
    CHECK(valid_anchor_positions(exact, 16) == std::vector<int32_t>{0});
    CHECK_ERROR(sample_anchors(exact, 0, 16, rng), "sample_anchors: N = 0 anchors per sequence; fix: use at least 1");
    CHECK_ERROR(eval_anchor_passes(exact, 2, 0), "eval_anchor_passes: block size 0; fix: use at least 1");
    CHECK_ERROR(valid_anchor_positions(exact, -1), "valid_anchor_positions: block size -1");
  }

  TEST_CASE("anchors: uniform over the valid positions (chi-square), and seeded") {
    Sequence s = seq(std::vector<int32_t>(40, 1), std::vector<uint8_t>(40, 0));
    std::vector<int32_t> valid;
    for (int32_t p = 0; p <= 40 - 8; p += 2) {
      s.loss_mask[size_t(p)] = 1;
      valid.push_back(p);
    }
    s.loss_mask[37] = 1;  // past the last anchor position: never sampled
    for (int64_t N : {1, 4}) {
      std::mt19937_64 rng(100 + uint64_t(N));
      const int trials = 20000;
      std::map<int32_t, double> count;
      for (int t = 0; t < trials; ++t) {
        AnchorSet a = sample_anchors(s, N, 8, rng);
        for (int64_t j = 0; j < N; ++j) count[a.anchors[size_t(j)]] += 1;
      }
      CHECK(count.size() == valid.size());
      const double expect = double(trials) * double(N) / double(valid.size());
      double chi2 = 0;
      for (int32_t p : valid) chi2 += (count[p] - expect) * (count[p] - expect) / expect;
      CHECK(chi2 < 50);  // 16 degrees of freedom: mean 16; 50 is far in the tail
    }
    std::mt19937_64 r1(3), r2(3), r3(4);
    AnchorSet a1 = sample_anchors(s, 4, 8, r1), a2 = sample_anchors(s, 4, 8, r2), a3 = sample_anchors(s, 4, 8, r3);
    CHECK(a1.anchors == a2.anchors);
    CHECK(sample_anchors(s, 4, 8, r1).anchors != a1.anchors);  // the stream moves on
    CHECK((a1.anchors != a3.anchors || sample_anchors(s, 4, 8, r3).anchors != sample_anchors(s, 4, 8, r2).anchors));
  }

  TEST_CASE("anchors: eval passes cover every valid anchor once; the last pass is padded") {
    Sequence s = seq(std::vector<int32_t>(30, 2), std::vector<uint8_t>(30, 1));
    s.loss_mask[3] = 0;
    auto passes = eval_anchor_passes(s, 4, 8);  // valid: 0..22 without 3 = 22 anchors
    REQUIRE(passes.size() == 6);
    std::vector<int32_t> covered;
    for (const AnchorSet& a : passes)
      for (size_t j = 0; j < 4; ++j)
        if (a.keep[j]) covered.push_back(a.anchors[j]);
    std::vector<int32_t> want;
    for (int32_t p = 0; p <= 22; ++p)
      if (p != 3) want.push_back(p);
    CHECK(covered == want);
    CHECK(passes.back().keep == std::vector<uint8_t>{1, 1, 0, 0});
    CHECK(passes.back().anchors == std::vector<int32_t>{21, 22, 0, 0});
    CHECK(eval_anchor_passes(seq({1, 2}, {1, 1}), 4, 8).empty());
  }

  TEST_CASE("fill_batch: layout, padding, truncation to S, real tokens; anchors never reach padding") {
    const Bucket bucket{8, 3, 3};  // S 8, N 3, B 3
    std::vector<Sequence> seqs = {seq({1, 2, 3, 4, 5}, {0, 1, 1, 1, 1}), seq({9, 8, 7, 6, 5, 4, 3, 2, 1, 1, 1}, {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1})};
    std::vector<int32_t> ids(24, -1), mask(24, -1), anchors(9, -1), keep(9, -1);
    BatchArrays out{ids, mask, anchors, keep};
    std::vector<AnchorSet> given = {{{1, 2, 0}, {1, 1, 0}}, {{0, 4, 6}, {1, 1, 1}}};
    CHECK(fill_batch(seqs, given, bucket, 2, out) == 5 + 8);
    CHECK(ids == std::vector<int32_t>{1, 2, 3, 4, 5, 0, 0, 0, 9, 8, 7, 6, 5, 4, 3, 2, 0, 0, 0, 0, 0, 0, 0, 0});
    CHECK(mask == std::vector<int32_t>{0, 1, 1, 1, 1, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0});
    CHECK(anchors == std::vector<int32_t>{1, 2, 0, 0, 4, 6, 0, 0, 0});
    CHECK(keep == std::vector<int32_t>{1, 1, 0, 1, 1, 1, 0, 0, 0});
    std::vector<AnchorSet> past_end = {{{1, 4, 0}, {1, 1, 0}}, {{0, 4, 6}, {1, 1, 1}}};  // 4 > 5 - 2
    CHECK_ERROR(fill_batch(seqs, past_end, bucket, 2, out), "row 0 keeps anchor 4, which is not a valid anchor of the sequence staged with length 5");
    std::vector<AnchorSet> past_s = {given[0], {{0, 4, 7}, {1, 1, 1}}};  // valid before truncation only
    CHECK_ERROR(fill_batch(seqs, past_s, bucket, 2, out), "row 1 keeps anchor 7");
    std::vector<AnchorSet> masked = {{{0, 0, 0}, {1, 0, 0}}, given[1]};  // loss_mask[0] = 0
    CHECK_ERROR(fill_batch(seqs, masked, bucket, 2, out), "row 0 keeps anchor 0");
    CHECK_ERROR(fill_batch(seqs, std::vector<AnchorSet>{given[0]}, bucket, 2, out), "2 sequences and 1 anchor sets");
    std::vector<AnchorSet> short_set = {{{1}, {1}}, given[1]};
    CHECK_ERROR(fill_batch(seqs, short_set, bucket, 2, out), "the anchor set of row 0 has 1 anchors and 1 keep flags; fix: make both N = 3");
    std::vector<int32_t> small(5);
    CHECK_ERROR(fill_batch(seqs, given, bucket, 2, BatchArrays{small, mask, anchors, keep}), "output sizes input_ids 5, loss_mask 24");
    std::vector<Sequence> four(4, seqs[0]);
    CHECK_ERROR(fill_batch(four, std::vector<AnchorSet>(4, given[0]), bucket, 2, out), "4 sequences and 4 anchor sets; fix: pass at most 3");

    // Sampled: a sequence of length 20 (bs 16) padded into S 64 has anchors 0..4 only.
    const Bucket big{64, 8, 2};
    std::vector<int32_t> ids2(128), mask2(128), anchors2(16), keep2(16);
    std::vector<Sequence> one = {seq(std::vector<int32_t>(20, 5), std::vector<uint8_t>(20, 1))};
    std::mt19937_64 rng(1), again(1);
    CHECK(fill_batch(one, big, 16, rng, BatchArrays{ids2, mask2, anchors2, keep2}) == 20);
    CHECK(std::vector<int32_t>(anchors2.begin(), anchors2.begin() + 8) == std::vector<int32_t>{0, 1, 2, 3, 4, 0, 0, 0});
    CHECK(std::vector<int32_t>(keep2.begin(), keep2.begin() + 8) == std::vector<int32_t>{1, 1, 1, 1, 1, 0, 0, 0});
    CHECK(std::all_of(keep2.begin() + 8, keep2.end(), [](int32_t k) { return k == 0; }));
    // Truncated: anchors come from the first S tokens.
    std::vector<Sequence> longer = {seq(std::vector<int32_t>(100, 5), std::vector<uint8_t>(100, 1))};
    CHECK(fill_batch(longer, big, 16, rng, BatchArrays{ids2, mask2, anchors2, keep2}) == 64);
    for (int j = 0; j < 8; ++j) CHECK(anchors2[size_t(j)] <= 64 - 16);
    CHECK(sample_anchors(truncate_sequence(longer[0], 64), 8, 16, again).anchors.size() == 8);
    // The truncated sequence keeps its last valid anchor, S - bs = 48: here the only one.
    std::vector<Sequence> late = {seq(std::vector<int32_t>(100, 5), std::vector<uint8_t>(100, 0))};
    for (size_t p = 48; p < 100; ++p) late[0].loss_mask[p] = 1;
    CHECK(fill_batch(late, big, 16, rng, BatchArrays{ids2, mask2, anchors2, keep2}) == 64);
    CHECK(std::vector<int32_t>(anchors2.begin(), anchors2.begin() + 8) == std::vector<int32_t>{48, 0, 0, 0, 0, 0, 0, 0});
    CHECK(std::vector<int32_t>(keep2.begin(), keep2.begin() + 8) == std::vector<int32_t>{1, 0, 0, 0, 0, 0, 0, 0});
  }
}

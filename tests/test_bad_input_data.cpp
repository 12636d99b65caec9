// Bad input in the data: sequences without a valid anchor are skipped at load and
// counted (training and eval); a training set without any valid anchor is refused before startup;
// drafter.mask_token_id occurring in the data is warned about with its count.
#include <fstream>
#include <set>

#include "data/screen.h"
#include "runtime/fileio.h"
#include "tests/capture_output.h"
#include "tests/data_test_util.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

// The fixture's jobs: block size 4, mask token 63, buckets seq 16 and 32, vocab 64.
constexpr int kBlock = 4;

std::string jsonl_line(const Sequence& s) {
  nlohmann::json j;
  j["input_ids"] = s.input_ids;
  j["loss_mask"] = std::vector<int>(s.loss_mask.begin(), s.loss_mask.end());
  return j.dump() + "\n";
}

// `good` sequences of length 12 with loss_mask 1 after a 4-token prompt (anchors 4..8), followed by
// `no_anchor` sequences without a valid anchor (alternately shorter than the block size, and
// trained-on only in their last block_size - 1 positions).
fs::path write_data(const std::string& name, int good, int no_anchor, int32_t first_id = 1) {
  fs::path p = trainer_root() / name;
  std::string text;
  for (int i = 0; i < good; ++i) {
    Sequence s;
    for (int k = 0; k < 12; ++k) {
      s.input_ids.push_back((first_id + 7 * i + 3 * k) % 60);
      s.loss_mask.push_back(k >= 4);
    }
    text += jsonl_line(s);
  }
  for (int i = 0; i < no_anchor; ++i) {
    if (i % 2 == 0) text += jsonl_line(seq({5, 6, 7}, {1, 1, 1}));
    else text += jsonl_line(seq({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
  }
  write_file_atomic(p, text);
  return p;
}

std::string error_of_training(const Config& cfg) {
  try {
    run_training(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("bad-input-data") {
  TEST_CASE("screening finds the sequences without a valid anchor as staged, and the mask token") {
    const std::vector<Bucket> buckets = {{16, 2, 2}, {32, 4, 2}};
    std::vector<Sequence> seqs = {
        seq({1, 2, 3}, {1, 1, 1}),                          // shorter than the block size
        seq({1, 2, 3, 4, 5, 6, 7, 8}, {0, 0, 0, 0, 0, 1, 1, 1}),  // loss only at p > len - bs = 4
        seq({1, 2, 3, 4, 5, 6, 7, 8}, {0, 0, 0, 0, 1, 0, 0, 0}),  // p = 4 = len - bs: valid
        {},                                                 // 40 tokens, trained on only past 32
        seq({63, 2, 3, 63, 5}, {1, 1, 1, 1, 1}),            // the mask token twice
    };
    for (int k = 0; k < 40; ++k) {
      seqs[3].input_ids.push_back(k + 1);
      seqs[3].loss_mask.push_back(k >= 30);
    }
    MemoryDataset data(seqs, 64, "mem");
    const DataScreen t = screen_dataset(data, buckets, OverflowPolicy::truncate, kBlock, 63);
    CHECK(t.no_anchor == std::vector<uint8_t>{1, 1, 0, 1, 0});
    CHECK(t.no_anchor_count == 3);
    CHECK(t.shorter_than_block == 1);
    CHECK(t.mask_token_count == 2);
    CHECK(t.mask_token_sequences == 1);
    CHECK(t.first_mask_sequence == 4);
    // Under "skip" the long sequence is never staged, so it is not counted as without anchor.
    const DataScreen s = screen_dataset(data, buckets, OverflowPolicy::skip, kBlock, 63);
    CHECK(s.no_anchor == std::vector<uint8_t>{1, 1, 0, 0, 0});
    CHECK(no_anchor_summary(s, kBlock) == "without a valid anchor: 2 skipped (1 shorter than the block size 4)");
    const std::optional<std::string> w = mask_token_warning(t, 63, "training data 'mem'");
    REQUIRE(w);
    CHECK(w->find("drafter.mask_token_id = 63 occurs 2 times in 1 sequence of the training data 'mem' (first in "
                  "sequence 4)") != std::string::npos);
    CHECK(!mask_token_warning(screen_dataset(data, buckets, OverflowPolicy::skip, kBlock, 62), 62, "x"));
  }

  TEST_CASE("screening at the edges: a block-size sequence is not shorter than the block; the first mask sequence is the first") {
    const std::vector<Bucket> buckets = {{16, 2, 2}};
    const std::vector<Sequence> seqs = {
        seq({1, 2, 3, 4}, {0, 1, 1, 1}),           // exactly the block size, loss only past p = 0: no anchor
        seq({1, 63, 3, 4, 5}, {1, 1, 1, 1, 1}),    // the mask token first here
        seq({63, 2, 3, 4, 63}, {1, 1, 1, 1, 1}),   // and twice here
        seq({1, 2, 3}, {1, 1, 1}),                 // shorter than the block size
    };
    MemoryDataset data(seqs, 64, "mem");
    const DataScreen s = screen_dataset(data, buckets, OverflowPolicy::truncate, kBlock, 63);
    CHECK(s.no_anchor == std::vector<uint8_t>{1, 0, 0, 1});
    CHECK(s.no_anchor_count == 2);
    CHECK(s.shorter_than_block == 1);
    CHECK(no_anchor_summary(s, kBlock) == "without a valid anchor: 2 skipped (1 shorter than the block size 4)");
    CHECK(s.mask_token_count == 3);
    CHECK(s.mask_token_sequences == 2);
    CHECK(s.first_mask_sequence == 1);
    const std::optional<std::string> w = mask_token_warning(s, 63, "eval data 'mem'");
    REQUIRE(w);
    CHECK(w->find("occurs 3 times in 2 sequences of the eval data 'mem' (first in sequence 1)") != std::string::npos);
  }

  TEST_CASE("the planner never emits a sequence flagged without anchor, and refuses when nothing is left") {
    const std::vector<Bucket> buckets = {{16, 2, 2}, {32, 4, 3}};
    const std::vector<int64_t> lengths = {10, 12, 20, 30, 8, 16, 40};
    const std::vector<uint8_t> flags = {0, 1, 0, 1, 0, 0, 1};  // 6: too long, truncated, but flagged
    BatchPlanner p(lengths, buckets, OverflowPolicy::truncate, 5, "d", flags);
    CHECK(p.no_anchor() == 3);
    CHECK(p.truncated() == 0);
    std::multiset<int64_t> seen;
    while (p.epoch() < 3) {
      MicroBatch mb = p.next();
      if (p.epoch() >= 3) break;
      for (int64_t s : mb.sequences) seen.insert(s);
    }
    CHECK(seen == std::multiset<int64_t>{0, 0, 0, 2, 2, 2, 4, 4, 4, 5, 5, 5});
    CHECK_THROWS_WITH_AS(BatchPlanner({70, 10, 12}, buckets, OverflowPolicy::skip, 0, "d", {0, 1, 1}),
                         doctest::Contains("d: no sequence to train on (3 sequences, 1 skipped as longer than the "
                                           "largest bucket, seq 32, 2 without a valid anchor"),
                         Error);
    CHECK_THROWS_WITH_AS(BatchPlanner({10, 12}, buckets, OverflowPolicy::skip, 0, "d", {0}),
                         doctest::Contains("1 no-anchor flags for 2 sequences"), Error);
  }

  TEST_CASE("training skips sequences without a valid anchor and counts them in the data line") {
    const fs::path data = write_data("mixed.jsonl", 3, 5);
    Config cfg = small_job("mixed-anchors", {"data.train=" + data.string(), "checkpoint.resume=false"}, 3);
    CaptureFd out(1);
    TrainResult r = run_training(cfg);
    const std::string log = out.text();
    INFO(log);
    CHECK(r.steps_done == 3);
    CHECK(log.find("data: 8 training sequences") != std::string::npos);
    CHECK(log.find("without a valid anchor: 5 skipped (3 shorter than the block size 4)") != std::string::npos);
    CHECK(log.find("8 eval sequences, without a valid anchor: 0 skipped") != std::string::npos);
    // All 8 fit bucket 16 (batch 3). With the 5 skipped, an epoch is the 3 good ones, one
    // micro-batch; 3 steps of 2 workers x 2 micro-batches take 12, so the 12th began epoch 11.
    // (With all 8, an epoch would be 3 micro-batches, and the run would stand in epoch 3.)
    const nlohmann::json state = nlohmann::json::parse(read_file_text(r.last_checkpoint / "state.json"));
    CHECK(state["planner"]["epoch"] == 11);
    for (const nlohmann::json& rec : step_records(cfg.job.dump_folder)) CHECK(rec.at("loss").get<double>() > 0.5);
  }

  TEST_CASE("a training set without any valid anchor is refused before startup, with the counts") {
    const fs::path data = write_data("no-anchors.jsonl", 0, 7);
    Config cfg = small_job("no-anchors", {"data.train=" + data.string()}, 3);
    const std::string msg = error_of_training(cfg);
    INFO(msg);
    CHECK(msg.find("training data '" + data.string() + "': no sequence has a valid anchor (7 sequences, 4 shorter "
                   "than the block size 4, the others with no loss_mask = 1 at a position p <= length - block "
                   "size)") != std::string::npos);
    CHECK(msg.find("fix:") != std::string::npos);
    CHECK_FALSE(fs::exists(cfg.job.dump_folder / "startup.json"));  // nothing was recorded
    CHECK_FALSE(fs::exists(cfg.job.dump_folder / "checkpoints"));
  }

  TEST_CASE("the mask token in the training data is warned about with its count") {
    const fs::path data = write_data("masked.jsonl", 10, 0, 63);  // ids (63 + 7i + 3k) % 60: 63 never; add it
    std::string text = read_file_text(data);
    text += jsonl_line(seq({1, 63, 2, 63, 3, 4, 63, 5}, {0, 1, 1, 1, 1, 1, 1, 1}));
    text += jsonl_line(seq({63, 2, 3, 4, 5, 6}, {0, 1, 1, 1, 1, 1}));
    write_file_atomic(data, text);
    Config cfg = small_job("masked", {"data.train=" + data.string()}, 2);
    CaptureFd err(2);
    run_training(cfg);
    const std::string warnings = err.text();
    INFO(warnings);
    CHECK(warnings.find("warning: drafter.mask_token_id = 63 occurs 4 times in 2 sequences of the training data '" +
                        data.string() + "' (first in sequence 10)") != std::string::npos);
    CHECK(warnings.find("eval data") == std::string::npos);  // the fixture's eval data never hold it
  }

  TEST_CASE("eval skips sequences without a valid anchor, counts them under \"skipped\", and refuses a set of none") {
    Config src = small_job("eval-anchors-src", {}, 2);
    const TrainResult trained = run_training(src);
    const fs::path clean = write_data("eval-clean.jsonl", 6, 0, 11), mixed = trainer_root() / "eval-mixed.jsonl";
    std::string text;
    text += jsonl_line(seq({5, 6, 7}, {1, 1, 1}));
    text += read_file_text(clean);
    text += jsonl_line(seq({1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, {0, 0, 0, 0, 0, 0, 0, 1, 1, 1}));
    write_file_atomic(mixed, text);
    const EvalResult a = run_eval(small_job("eval-anchors-a", {"data.eval=" + clean.string()}), trained.last_checkpoint);
    const EvalResult b = run_eval(small_job("eval-anchors-b", {"data.eval=" + mixed.string()}), trained.last_checkpoint);
    CHECK(a.skipped == 0);
    CHECK(b.skipped == 2);
    CHECK(b.to_json().at("skipped") == 2);
    CHECK(b.sequences == a.sequences);
    CHECK(b.blocks == a.blocks);
    CHECK(b.tokens == a.tokens);
    CHECK(b.loss == a.loss);
    CHECK(b.tau == a.tau);

    const fs::path none = write_data("eval-none.jsonl", 0, 3);
    CHECK_THROWS_WITH_AS(run_eval(small_job("eval-anchors-none", {"data.eval=" + none.string()}), trained.last_checkpoint),
                         doctest::Contains("no eval sequence has a valid anchor (3 sequences, 3 without a valid anchor"),
                         Error);
  }
}

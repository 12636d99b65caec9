// Data keys and their exact effects: data.synthetic.temperature (0 and near 0: every generated
// token is the target's argmax; very large: nearly uniform), `dflash-train prepare` (the binary)
// writing to data.shards, shards giving exactly the JSONL's batches, data.hidden being where
// `hidden` writes and offline training reads, and `hidden` under data.overflow = "skip" storing a
// too-long sequence empty in its place (every other one's rows and features as without it).
#include <cstdlib>

#include "data/shards.h"
#include "model/target.h"
#include "runtime/fileio.h"
#include "tests/data_test_util.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/job.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
void quiet(const std::string&) {}

// The share of generated tokens (positions past the prompt) that equal the target's argmax over
// the ids other than the mask, counting only positions whose top-2 margin exceeds `margin`; and
// how many positions counted.
std::pair<double, int64_t> argmax_share(const Config& cfg, const std::vector<Sequence>& seqs, float margin) {
  CpuRuntime rt;
  const int64_t mask = *cfg.drafter.mask_token_id, prompt = cfg.data.synthetic.prompt_length;
  Target target(cfg.target.path, {0}, cfg.data.synthetic.max_length);
  int64_t hits = 0, counted = 0;
  for (const Sequence& s : seqs) {
    const int64_t len = s.length(), V = target.spec().vocab_size;
    std::vector<float> logits = target.logits(Tensor::from_ints({1, len}, s.input_ids)).to_floats();
    for (int64_t p = prompt; p < len; ++p) {
      CHECK(s.input_ids[size_t(p)] != mask);
      CHECK(s.loss_mask[size_t(p)] == 1);
      const float* row = logits.data() + (p - 1) * V;
      int64_t best = -1, second = -1;
      for (int64_t v = 0; v < V; ++v) {
        if (v == mask) continue;
        if (best < 0 || row[v] > row[best]) second = best, best = v;
        else if (second < 0 || row[v] > row[second]) second = v;
      }
      if (row[best] - row[second] <= margin) continue;
      ++counted;
      hits += s.input_ids[size_t(p)] == best;
    }
  }
  return {double(hits) / double(counted), counted};
}

fs::path self_dir() { return fs::canonical("/proc/self/exe").parent_path(); }
}  // namespace

TEST_SUITE("config-effects") {
  TEST_CASE("data.synthetic.temperature: 0 and 1e-3 continue with the target's argmax; 1e4 samples nearly uniformly") {
    for (double t : {0.0, 1e-3, 1e4}) {
      CAPTURE(t);
      std::string dir = trainer_root().string() + "/temperature-" + std::to_string(int(t * 1000));
      Config cfg = small_job("temperature", {"data.train=\"" + dir + "/train.jsonl\"", "data.eval=\"\"",
                                             "data.synthetic.train_sequences=16",
                                             "data.synthetic.temperature=" + std::to_string(t)});
      Job job = setup_job(cfg, quiet);
      std::unique_ptr<Dataset> data = open_train_data(job, quiet);
      REQUIRE(data->size() == 16);
      std::vector<Sequence> seqs;
      for (int64_t i = 0; i < data->size(); ++i) seqs.push_back(data->get(i));
      // Below 1e-3 * 40 a near-tie could go either way under t = 1e-3 (exp(-40) is not 0 in double).
      auto [share, counted] = argmax_share(cfg, seqs, 0.05f);
      REQUIRE(counted > 200);
      if (t < 1) CHECK(share == 1.0);
      else CHECK(share < 0.15);  // uniform over the 63 ids other than the mask: 1/63
    }
  }

  TEST_CASE("dflash-train prepare writes token shards to data.shards; training from them equals training from JSONL") {
    const fs::path root = trainer_root(), shards = root / "custom-shards";
    const fs::path config = root / "prepare.toml";
    write_file_atomic(config, small_job_toml("prepare-dump", 3));
    const fs::path log = root / "prepare.log", binary = self_dir() / "dflash-train";
    REQUIRE_MESSAGE(fs::exists(binary), binary.string() << " is missing: build the dflash-train target too");
    const std::string cmd = binary.string() + " prepare --config " + config.string() +
                            " --data.shards=" + shards.string() + " > " + log.string() + " 2>&1";
    REQUIRE(std::system(cmd.c_str()) == 0);
    const std::string out = read_file_text(log);
    CHECK(out.find("-> " + (shards / "train").string()) != std::string::npos);
    CHECK(out.find("-> " + (shards / "eval").string()) != std::string::npos);
    CHECK_FALSE(fs::exists(root / "prepare-dump" / "shards"));  // the default place stays empty
    // The shards hold the JSONL's sequences, in order.
    for (const char* part : {"train", "eval"}) {
      std::vector<Sequence> jsonl = read_jsonl(root / "data" / (std::string(part) + ".jsonl"), 64);
      std::unique_ptr<Dataset> packed = open_dataset(shards / part, 64);
      REQUIRE(packed->size() == int64_t(jsonl.size()));
      for (int64_t i = 0; i < packed->size(); ++i) {
        CHECK(packed->get(i).input_ids == jsonl[size_t(i)].input_ids);
        CHECK(packed->get(i).loss_mask == jsonl[size_t(i)].loss_mask);
      }
    }
    Config from_jsonl = small_job("from-jsonl", {"training.steps=3"}, 3);
    Config from_shards = small_job("from-shards", {"training.steps=3", "data.train=\"" + (shards / "train").string() + "\"",
                                                   "data.eval=\"" + (shards / "eval").string() + "\""},
                                   3);
    TrainResult a = run_training(from_jsonl), b = run_training(from_shards);
    std::vector<nlohmann::json> ra = step_records(from_jsonl.job.dump_folder), rb = step_records(from_shards.job.dump_folder);
    REQUIRE(ra.size() == 3);
    REQUIRE(rb.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(ra[i]["loss"] == rb[i]["loss"]);
      CHECK(ra[i]["grad_norm"] == rb[i]["grad_norm"]);
      CHECK(ra[i]["tokens"] == rb[i]["tokens"]);
      CHECK(ra[i]["bucket"] == rb[i]["bucket"]);
    }
    REQUIRE(a.after);
    REQUIRE(b.after);
    CHECK(a.after->loss == b.after->loss);
    CHECK(a.after->tau == b.after->tau);
  }

  TEST_CASE("hidden under data.overflow = skip: a too-long sequence is stored empty in its place, in data order") {
    // Lengths 12 (bucket 16), 20 (bucket 32), 40 (over the largest bucket, 32: skipped), 14, 25; the
    // skipped one arrives while sequence 1's group is still waiting for its batch.
    std::vector<Sequence> all = random_sequences(5, 17, 63, 10, 10);
    const std::vector<int64_t> lengths = {12, 20, 40, 14, 25};
    for (size_t i = 0; i < all.size(); ++i) {
      all[i].input_ids.resize(size_t(lengths[i]), 5);
      all[i].loss_mask.assign(size_t(lengths[i]), 1);
    }
    std::vector<Sequence> kept = {all[0], all[1], all[3], all[4]};
    write_jsonl(trainer_root() / "skip-all.jsonl", all);
    write_jsonl(trainer_root() / "skip-kept.jsonl", kept);
    auto hidden = [&](const std::string& name, const std::string& data) {
      Config c = small_job(name, {"data.train=\"" + (trainer_root() / data).string() + "\"", "data.eval=\"\"",
                                  "data.overflow=\"skip\""});
      run_hidden(c);
      return c.job.dump_folder / "hidden";
    };
    const fs::path a = hidden("hidden-skip-all", "skip-all.jsonl"), b = hidden("hidden-skip-kept", "skip-kept.jsonl");
    const int64_t width = nlohmann::json::parse(read_file_text(a / "index.json")).at("feature_width").get<int64_t>();
    // The rows expected from the lengths by hand: each length (at most 32), 0 for the skipped one.
    HiddenDataset with(a, width, HiddenDType::f32, {12, 20, 0, 14, 25});
    HiddenDataset without(b, width, HiddenDType::f32, {12, 20, 14, 25});
    CHECK(with.rows(2) == 0);
    const std::vector<std::pair<int64_t, int64_t>> same = {{0, 0}, {1, 1}, {3, 2}, {4, 3}};
    for (const auto& [i, j] : same) {
      CAPTURE(i);
      CHECK(with.get(i) == without.get(j));
    }
  }

  TEST_CASE("data.hidden: `hidden` writes the shards there and offline training reads them from there") {
    const fs::path custom = trainer_root() / "custom-hidden";
    Config offline = small_job("hidden-key", {"training.steps=3", "data.eval=\"\"", "data.mode=offline",
                                              "data.hidden=\"" + custom.string() + "\""},
                               3);
    run_hidden(offline);
    CHECK(fs::exists(custom / "index.json"));
    CHECK_FALSE(fs::exists(offline.job.dump_folder / "hidden"));
    run_training(offline);
    Config online = small_job("hidden-key-online", {"training.steps=3", "data.eval=\"\""}, 3);
    run_training(online);
    std::vector<nlohmann::json> a = step_records(online.job.dump_folder), b = step_records(offline.job.dump_folder);
    REQUIRE(a.size() == 3);
    REQUIRE(b.size() == 3);
    for (size_t i = 0; i < 3; ++i) {
      CHECK(a[i]["loss"] == b[i]["loss"]);
      CHECK(a[i]["grad_norm"] == b[i]["grad_norm"]);
    }
  }
}

// dflash-train eval on the golden case reports its eval_every_anchor figures; eval does not
// depend on batching; longer eval sequences are truncated (the golden figures) or skipped and
// counted under data.overflow; its progress counts exactly its micro-batches; export of a trained
// checkpoint reloads (f32 exactly, bf16 rounded to nearest even); job-level bad input is refused
// with the file, key and fix.
#include <cstring>
#include <fstream>

#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/export.h"
#include "train/eval.h"
#include "train/job.h"
#include "train/replica.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace dflash::test {
// An export folder of the golden drafter, and the golden batch's two sequences as eval JSONL.
fs::path golden_eval_setup() {
  fs::path dir = trainer_root() / "golden-eval";
  if (fs::exists(dir / "eval.jsonl")) return dir;
  fs::create_directories(dir / "drafter");
  fs::copy_file(golden_dir() / "drafter_config.json", dir / "drafter" / "config.json");
  fs::copy_file(golden_dir() / "drafter_init.safetensors", dir / "drafter" / "model.safetensors");
  SafeTensors batch(golden_dir() / "batch.safetensors");
  std::vector<int32_t> ids = batch.read_ints("input_ids"), mask = batch.read_ints("loss_mask");
  std::ofstream out(dir / "eval.jsonl");
  for (int b = 0; b < 2; ++b) {
    nlohmann::json j;
    j["input_ids"] = std::vector<int32_t>(ids.begin() + b * 40, ids.begin() + (b + 1) * 40);
    j["loss_mask"] = std::vector<int32_t>(mask.begin() + b * 40, mask.begin() + (b + 1) * 40);
    out << j.dump() << "\n";
  }
  return dir;
}

Config golden_eval_config(int64_t anchors, int64_t batch, const std::string& extra_bucket = "",
                          const std::string& devices = "cpu") {
  fs::path dir = golden_eval_setup();
  std::string toml = R"(
[job]
dump_folder = ")" + (dir / "dump").string() + R"("
[target]
path = ")" + (golden_dir() / "target-qwen3").string() + R"("
layer_ids = [1, 2]
[drafter]
num_hidden_layers = 2
intermediate_size = 128
block_size = 4
mask_token_id = 319
loss_decay_gamma = 4.0
[runtime]
devices = ")" + devices + R"("
[data]
train = ")" + (dir / "eval.jsonl").string() + R"("
eval = ")" + (dir / "eval.jsonl").string() + R"("
[[buckets]]
seq = 40
anchors = )" + std::to_string(anchors) + R"(
batch = )" + std::to_string(batch) + "\n" + extra_bucket;
  return parse_config(toml, dir / "golden.toml");
}
}  // namespace dflash::test

TEST_SUITE("eval") {
  TEST_CASE("dflash-train eval on the golden case reports its eval_every_anchor figures") {
    EvalResult r = run_eval(golden_eval_config(8, 2), golden_eval_setup() / "drafter");
    CHECK(r.loss == doctest::Approx(5.40751505074031).epsilon(1e-5));
    CHECK(r.accuracy == doctest::Approx(0.09039547971527978).epsilon(1e-5));
    CHECK(r.tau == doctest::Approx(1.1147540983606556).epsilon(1e-6));
    CHECK(r.blocks == 61);
    CHECK(r.tokens == 177);
  }

  TEST_CASE("eval figures do not depend on batching or buckets") {
    EvalResult a = run_eval(golden_eval_config(8, 2), golden_eval_setup() / "drafter");
    EvalResult b = run_eval(golden_eval_config(3, 1, "[[buckets]]\nseq = 64\nanchors = 5\nbatch = 3\n"),
                            golden_eval_setup() / "drafter");
    CHECK(b.loss == doctest::Approx(a.loss).epsilon(1e-6));
    CHECK(b.accuracy == doctest::Approx(a.accuracy).epsilon(1e-6));
    CHECK(b.tau == a.tau);
    CHECK(b.blocks == a.blocks);
    CHECK(b.tokens == a.tokens);
  }

  TEST_CASE("eval under data.overflow: longer sequences are truncated to the largest bucket, or skipped and counted") {
    const fs::path dir = golden_eval_setup();
    // The golden sequences (40 tokens, the bucket's seq) with 9 more tokens each, all trained on.
    std::ifstream in(dir / "eval.jsonl");
    std::string line, golden, longer;
    while (std::getline(in, line)) {
      golden += line + "\n";
      nlohmann::json j = nlohmann::json::parse(line);
      for (int k = 0; k < 9; ++k) {
        j["input_ids"].push_back(7 + k);
        j["loss_mask"].push_back(1);
      }
      longer += j.dump() + "\n";
    }
    write_file_atomic(dir / "eval-longer.jsonl", longer);
    write_file_atomic(dir / "eval-mixed.jsonl", longer.substr(0, longer.find('\n') + 1) + golden);
    // Truncated to 40 tokens they are the golden sequences: the golden figures (first case above).
    Config cfg = golden_eval_config(8, 2);
    cfg.data.eval = dir / "eval-longer.jsonl";
    cfg.data.overflow = "truncate";
    EvalResult t = run_eval(cfg, dir / "drafter");
    CHECK(t.loss == doctest::Approx(5.40751505074031).epsilon(1e-5));
    CHECK(t.tau == doctest::Approx(1.1147540983606556).epsilon(1e-6));
    CHECK(t.blocks == 61);
    CHECK(t.tokens == 177);
    CHECK(t.sequences == 2);
    CHECK(t.skipped == 0);
    // Skipped: the longer copy of sequence 0 is left out and counted; the golden two remain.
    cfg.data.eval = dir / "eval-mixed.jsonl";
    cfg.data.overflow = "skip";
    EvalResult k = run_eval(cfg, dir / "drafter");
    CHECK(k.loss == doctest::Approx(5.40751505074031).epsilon(1e-5));
    CHECK(k.blocks == 61);
    CHECK(k.sequences == 2);
    CHECK(k.skipped == 1);
    CHECK(k.no_anchor == 0);
  }

  TEST_CASE("eval's progress reaches exactly its micro-batches: each bucket's anchor passes, B at a time") {
    // The golden sequences have 31 and 30 valid anchors (bs 4): with N = 8, 4 + 4 passes, which a
    // bucket of batch 3 runs in ceil(8 / 3) = 3 micro-batches.
    Config cfg = golden_eval_config(8, 3);
    Job job = setup_job(cfg, [](const std::string&) {});
    Replica replica(replica_options(job, /*eval=*/true, /*features=*/false));
    replica.build(worker_memory_bytes(job));
    std::vector<std::pair<int64_t, int64_t>> calls;
    EvalResult r = evaluate(replica, *open_eval_data(job, [](const std::string&) {}), OverflowPolicy::truncate,
                            [&](int64_t done, int64_t total) { calls.emplace_back(done, total); });
    CHECK(calls == std::vector<std::pair<int64_t, int64_t>>{{1, 3}, {2, 3}, {3, 3}});
    CHECK(r.blocks == 61);
  }

  TEST_CASE("eval without data.eval is refused, naming the config file and the key") {
    Config cfg = golden_eval_config(8, 2);
    cfg.data.eval.clear();
    CHECK_THROWS_WITH_AS(run_eval(cfg, golden_eval_setup() / "drafter"),
                         doctest::Contains((cfg.source.string() + ": data.eval is not set; eval needs an eval data set").c_str()),
                         Error);
  }

  TEST_CASE("a drafter whose dims disagree with the config is refused, naming the key") {
    Config cfg = golden_eval_config(8, 2);
    cfg.drafter.intermediate_size = 96;
    CHECK_THROWS_WITH_AS(run_eval(cfg, golden_eval_setup() / "drafter"), doctest::Contains("intermediate_size"), Error);
  }
}

TEST_SUITE("export") {
  TEST_CASE("export of a trained checkpoint writes the SGLang format and warm-starts a new run") {
    Config cfg = small_job("export-src", {"training.steps=4"}, 4);
    TrainResult r = run_training(cfg);
    fs::path out = trainer_root() / "exported";
    run_export(r.last_checkpoint, out, "f32");
    nlohmann::json config = nlohmann::json::parse(read_file_text(out / "config.json"));
    CHECK(config["architectures"][0] == "DFlashDraftModel");
    CHECK(config["dflash_config"]["mask_token_id"] == 63);
    CHECK(config["block_size"] == 4);
    // The exported f32 weights equal the checkpoint's parameters.
    SafeTensors exported(out / "model.safetensors"), params(r.last_checkpoint / "params.safetensors");
    CHECK(exported.names() == params.names());
    for (const std::string& n : params.names()) CHECK(exported.read_floats(n) == params.read_floats(n));
    // A new job warm-starts from it; a bf16 export works too.
    run_export(r.last_checkpoint, trainer_root() / "exported-bf16", "bf16");
    {
      // The bf16 export holds BF16 tensors, each value the checkpoint's f32 rounded to nearest even
      // (done here on the bits), and says so in config.json.
      const fs::path bf = trainer_root() / "exported-bf16";
      CHECK(nlohmann::json::parse(read_file_text(bf / "config.json"))["torch_dtype"] == "bfloat16");
      SafeTensors half(bf / "model.safetensors");
      REQUIRE(half.names() == params.names());
      for (const std::string& n : params.names()) {
        INFO(n);
        CHECK(half.info(n).dtype == "BF16");
        const std::vector<float> f = params.read_floats(n), h = half.read_floats(n);
        REQUIRE(h.size() == f.size());
        size_t wrong = 0;
        for (size_t i = 0; i < f.size(); ++i) {
          uint32_t b;
          std::memcpy(&b, &f[i], 4);
          b = (b + 0x7fffu + ((b >> 16) & 1u)) & 0xffff0000u;  // round to nearest even (finite values)
          float want;
          std::memcpy(&want, &b, 4);
          wrong += h[i] != want;
        }
        CHECK(wrong == 0);
      }
    }
    Config warm = small_job("export-warm", {"training.steps=2", "drafter.init=" + out.string()}, 2);
    CHECK(run_training(warm).steps_done == 2);
    CHECK_THROWS_WITH_AS(run_export(r.last_checkpoint, out, "f16"), doctest::Contains("use bf16 (the default) or f32"), Error);
  }
}

TEST_SUITE("bad-input") {
  TEST_CASE("a dump folder that cannot be written is refused before anything runs") {
    fs::path blocker = trainer_root() / "a-file";
    write_file_atomic(blocker, std::string_view("x"));
    Config cfg = small_job("unused", {"job.dump_folder=" + (blocker / "dump").string()});
    CHECK_THROWS_WITH_AS(run_training(cfg), doctest::Contains("job.dump_folder"), Error);
    CHECK(read_file_text(blocker) == "x");  // nothing already written is damaged
    // A folder that exists but takes no files, even for root (so the check is not a permission bit).
    if (fs::is_directory("/proc")) {
      Config proc = small_job("unused", {"job.dump_folder=/proc"});
      CHECK_THROWS_WITH_AS(run_training(proc), doctest::Contains("job.dump_folder = \"/proc\" is not writable: "), Error);
    }
  }

  TEST_CASE("a warm start whose dims disagree with the target and drafter is refused") {
    Config src = small_job("dims-src", {"training.steps=2"}, 2);
    TrainResult r = run_training(src);
    Config other = small_job("dims-dst", {"training.steps=2", "drafter.num_hidden_layers=1",
                                          "drafter.init=" + r.last_checkpoint.string()}, 2);
    CHECK_THROWS_WITH_AS(run_training(other), doctest::Contains("num_hidden_layers"), Error);
  }

  TEST_CASE("training data with ids outside the target's vocabulary are refused with file and line") {
    fs::path bad = trainer_root() / "bad.jsonl";
    write_file_atomic(bad, std::string_view("{\"input_ids\": [1, 2, 3], \"loss_mask\": [0, 1, 1]}\n"
                                            "{\"input_ids\": [1, 64, 3], \"loss_mask\": [0, 1, 1]}\n"));
    Config cfg = small_job("bad-data", {"data.train=" + bad.string()});
    CHECK_THROWS_WITH_AS(run_training(cfg), doctest::Contains("bad.jsonl:2"), Error);
  }

  TEST_CASE("a target folder without config.json is named with the fix") {
    Config cfg = small_job("no-target", {"target.path=" + (trainer_root() / "nothing-here").string()});
    cfg.target.synthetic.enabled = false;
    CHECK_THROWS_WITH_AS(run_training(cfg), doctest::Contains("has no config.json"), Error);
  }

  TEST_CASE("devices that do not exist are refused with the alternatives") {
    RuntimeConfig rt;
    rt.devices = "cuda:3";
#ifndef DFLASH_CUDA
    CHECK_THROWS_WITH_AS(resolve_devices(rt, nullptr), doctest::Contains("use \"cpu\" or \"auto\""), Error);
#else
    CHECK_THROWS_AS(resolve_devices(rt, nullptr), Error);
#endif
    rt.devices = "cpu";
    rt.cpu_workers = 3;
    CHECK(resolve_devices(rt, nullptr).size() == 3);
  }
}

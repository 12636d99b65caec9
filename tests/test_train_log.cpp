// The trainer's log: every figure of a step under its own name in metrics.jsonl and the step line,
// and the ETA's durations at the unit boundaries.
#include "runtime/fileio.h"
#include "tests/test_util.h"
#include "train/train_log.h"

using namespace dflash;
using namespace dflash::test;
using json = nlohmann::json;

TEST_SUITE("trainer") {
  TEST_CASE("format_duration: seconds below a minute, minutes and seconds below an hour, then hours and minutes") {
    CHECK(format_duration(0) == "0s");
    CHECK(format_duration(59) == "59s");
    CHECK(format_duration(60) == "1m00s");
    CHECK(format_duration(125) == "2m05s");
    CHECK(format_duration(3599) == "59m59s");
    CHECK(format_duration(3600) == "1h00m");
    CHECK(format_duration(3661) == "1h01m");
    CHECK(format_duration(7322) == "2h02m");
  }

  TEST_CASE("a step record: metrics.jsonl holds each figure under its own key, the line shows each once") {
    StepRecord r;
    r.step = 3, r.loss = 1.5, r.accuracy = 0.25, r.tau = 2.5, r.grad_norm = 0.75, r.lr = 1e-3;
    r.tokens = 64, r.tokens_per_s = 1000, r.step_ms = 12.5, r.bucket = "16+32", r.memory_mib = 100;
    const json want = {{"step", 3},          {"loss", 1.5},          {"accuracy", 0.25}, {"tau", 2.5},
                       {"grad_norm", 0.75},  {"lr", 1e-3},           {"tokens", 64},     {"tokens_per_s", 1000.0},
                       {"step_ms", 12.5},    {"bucket", "16+32"},    {"memory_mib", 100.0}};
    CHECK(r.to_json() == want);
    CHECK(r.line(10) ==
          "step     3/10  loss 1.5000  acc 0.250  tau 2.500  gnorm 0.750  lr 1.00e-03  1000 tok/s  12.5 ms/step  "
          "bucket 16+32  mem 100 MiB");

    TempDir dir("train-log");
    {
      TrainLog log(dir.path, false);
      log.metrics(r.to_json());
    }
    {
      TrainLog again(dir.path, false);  // a resumed run appends
      r.step = 4;
      again.metrics(r.to_json());
    }
    const std::string text = read_file_text(dir / "metrics.jsonl");
    const size_t nl = text.find('\n');
    REQUIRE(nl != std::string::npos);
    CHECK(json::parse(text.substr(0, nl)) == want);
    CHECK(json::parse(text.substr(nl + 1))["step"] == 4);
  }
}

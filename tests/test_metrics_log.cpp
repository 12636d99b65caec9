// metrics.jsonl survives crashes and full disks: a write that fails (EIO, short, ENOSPC through
// /dev/full) is cut back off the file and stops the run after a checkpoint that keeps the records
// not written; a resume cuts the file back to the checkpoint's step (a torn line, later records)
// and makes a measurement of that step the stopped run had not written; every (kind, step) then
// appears once, as in an uninterrupted run, and a record whose log interval a checkpoint splits
// covers all its steps. A fresh run refuses an existing metrics.jsonl.
#include <cerrno>
#include <set>

#include "runtime/error.h"
#include "runtime/fileio.h"
#include "tests/capture_output.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/train_log.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// Every line of metrics.jsonl parsed (REQUIRE: each one is JSON), in order.
std::vector<json> all_records(const fs::path& dump) {
  std::vector<json> out;
  const std::string text = read_file_text(dump / "metrics.jsonl");
  REQUIRE((text.empty() || text.back() == '\n'));
  size_t at = 0;
  for (size_t nl; (nl = text.find('\n', at)) != std::string::npos; at = nl + 1) {
    json j = json::parse(text.substr(at, nl - at), nullptr, false);
    REQUIRE_MESSAGE(!j.is_discarded(), text.substr(at, nl - at));
    out.push_back(j);
  }
  return out;
}

// The (kind, step) of each record, in order.
std::vector<std::pair<std::string, int64_t>> kinds_and_steps(const std::vector<json>& records) {
  std::vector<std::pair<std::string, int64_t>> out;
  for (const json& j : records) out.emplace_back(record_kind(j), j.at("step").get<int64_t>());
  return out;
}

void append(const fs::path& file, const std::string& text) { std::ofstream(file, std::ios::app) << text; }

// Keeps the lines of metrics.jsonl for which keep(record) holds.
void keep_lines(const fs::path& file, const std::function<bool(const json&)>& keep) {
  std::string out;
  for (const json& j : all_records(file.parent_path()))
    if (keep(j)) out += j.dump() + "\n";
  write_file_atomic(file, out);
}

const std::vector<std::string> kEvery4 = {"checkpoint.every=4", "checkpoint.keep=10", "training.eval_every=4",
                                          "metrics.log_every=2"};

}  // namespace

TEST_SUITE("metrics-log") {
  TEST_CASE("a metrics write that fails (EIO, a short write) is cut off the file, kept, and nothing follows it") {
    for (const bool shortw : {false, true}) {
      CAPTURE(shortw);
      TempDir dir("metrics-fail");
      TrainLog log(dir.path, false);
      log.metrics({{"step", 1}, {"loss", 2.0}});
      log.set_write([shortw](int fd, const void* data, size_t bytes) -> long {
        if (shortw) return long(::write(fd, data, bytes / 2));
        errno = EIO;
        return -1;
      });
      log.metrics({{"step", 2}, {"loss", 1.5}});
      log.metrics({{"step", 3}, {"loss", 1.0}});
      CHECK(log.failed());
      CHECK(log.failure().find("cannot write " + (dir / "metrics.jsonl").string()) != std::string::npos);
      CHECK(log.failure().find(shortw ? "short write" : std::strerror(EIO)) != std::string::npos);
      REQUIRE(log.unwritten().size() == 2);
      CHECK(json::parse(log.unwritten()[0])["step"] == 2);
      CHECK(read_file_text(dir / "metrics.jsonl") == "{\"loss\":2.0,\"step\":1}\n");
    }
  }

  TEST_CASE("resume_at cuts a torn line and the records past the step, keeps the step's kinds, appends the unwritten") {
    TempDir dir("metrics-cut");
    write_file_atomic(dir / "metrics.jsonl",
                      std::string("{\"step\":0,\"eval\":\"eval before training\"}\n{\"step\":1,\"loss\":2}\n"
                                  "{\"step\":2,\"loss\":1}\n{\"step\":2,\"eval\":\"eval at step 2\"}\n"
                                  "{\"step\":3,\"loss\":1}\n{\"step\":4,\"lo"));
    TrainLog log(dir.path, false);
    CaptureFd out(STDOUT_FILENO);
    const std::string kinds = log.resume_at(2, {"{\"step\":2,\"eval\":\"spec_tau at step 2\"}\n"});
    const std::string said = out.text();
    CHECK(kinds == " train eval spec ");
    CHECK(said.find("metrics.jsonl: removed 1 record(s) after step 2 and a torn line") != std::string::npos);
    CHECK(kinds_and_steps(all_records(dir.path)) ==
          std::vector<std::pair<std::string, int64_t>>{{"eval", 0}, {"train", 1}, {"train", 2}, {"eval", 2}, {"spec", 2}});
    TrainLog again(dir.path, false);
    CHECK(again.resume_at(5, {}) == " ");  // nothing to cut: no log line
  }

  TEST_CASE("checkpoint.resume = false refuses an existing non-empty metrics.jsonl, naming it and the choices") {
    TempDir dir("metrics-fresh");
    { TrainLog empty(dir.path, false, true, true); }  // an empty file is no run's records
    append(dir / "metrics.jsonl", "{\"step\":1}\n");
    const std::string named = (dir / "metrics.jsonl").string() + " already holds 11 bytes";
    CHECK_THROWS_WITH_AS(TrainLog(dir.path, false, true, true), doctest::Contains(named.c_str()), Error);
    CHECK_THROWS_WITH_AS(TrainLog(dir.path, false, true, true),
                         doctest::Contains("fix: move that file away, choose another job.dump_folder, or resume the "
                                           "run (checkpoint.resume = true)"),
                         Error);
    Config cfg = small_job("metrics-fresh-run", {"checkpoint.resume=false"}, 2);
    fs::create_directories(cfg.job.dump_folder);
    append(cfg.job.dump_folder / "metrics.jsonl", "{\"step\":1}\n");
    CHECK_THROWS_WITH_AS(run_training(cfg), doctest::Contains("checkpoint.resume = false starts a new run"), Error);
    CHECK(read_file_text(cfg.job.dump_folder / "metrics.jsonl") == "{\"step\":1}\n");
  }

  TEST_CASE("a torn last line and records past the checkpoint: the resumed file equals an uninterrupted run's") {
    Config straight = small_job("metrics-straight", kEvery4, 10);
    run_training(straight);
    const auto want = kinds_and_steps(all_records(straight.job.dump_folder));
    CHECK(std::count(want.begin(), want.end(), std::pair<std::string, int64_t>{"eval", 4}) == 1);
    for (const bool eval_written : {true, false}) {
      CAPTURE(eval_written);
      Config cut = small_job(eval_written ? "metrics-cut-late" : "metrics-cut-early", kEvery4, 10);
      TrainHooks stop_at_6;
      stop_at_6.after_step = [](int64_t step) {
        if (step == 6) request_training_stop();
      };
      REQUIRE(run_training(cut, stop_at_6).steps_done == 6);
      // A crash after step 6's records but before its checkpoint; with !eval_written, before the
      // eval of step 4 that follows its checkpoint.
      fs::remove_all(cut.job.dump_folder / "checkpoints" / "step-6");
      const fs::path file = cut.job.dump_folder / "metrics.jsonl";
      if (!eval_written)
        keep_lines(file, [](const json& j) { return j["step"].get<int64_t>() < 4 || (j["step"] == 4 && !j.contains("eval")); });
      append(file, "{\"step\": 7, \"loss\": 1.2");
      TrainResult r = run_training(cut);
      CHECK(r.start_step == 4);
      const std::vector<json> got = all_records(cut.job.dump_folder);
      CHECK(kinds_and_steps(got) == want);
      const std::vector<json> a = step_records(straight.job.dump_folder), b = step_records(cut.job.dump_folder);
      REQUIRE(a.size() == b.size());
      for (size_t i = 0; i < a.size(); ++i) CHECK(a[i]["loss"] == b[i]["loss"]);  // log_every divides every
      // scripts/plot.py draws the result, where python3 has matplotlib (scripts/setup.sh installs it).
      if (exit_code(run_command("python3 -c 'import matplotlib'")) == 0) {
        const CommandOutput o = run_command("python3 '" + std::string(DFLASH_SOURCE_DIR) + "/scripts/plot.py' '" +
                                            cut.job.dump_folder.string() + "'");
        CHECK_MESSAGE(exit_code(o) == 0, o.text);
        CHECK(fs::exists(cut.job.dump_folder / "curves.png"));
      } else {
        MESSAGE("python3 has no matplotlib: scripts/plot.py not run");
      }
    }
  }

  TEST_CASE("a checkpoint inside a log interval: the records after the resume equal an uninterrupted run's") {
    // Checkpoints every 3 steps, records every 4 (steps 1, 4, 8, 10): the checkpoint keeps the
    // figures of the interval's steps it holds, so the record closing the interval covers them all.
    const std::vector<std::string> every3 = {"checkpoint.every=3", "checkpoint.keep=10", "metrics.log_every=4"};
    Config straight = small_job("metrics-interval-straight", every3, 10);
    run_training(straight);
    const std::vector<json> want = all_records(straight.job.dump_folder);
    for (const bool killed : {true, false}) {
      CAPTURE(killed);
      Config cut = small_job(killed ? "metrics-interval-killed" : "metrics-interval-stopped", every3, 10);
      TrainHooks stop;
      const int64_t at = killed ? 8 : 7;
      stop.after_step = [at](int64_t step) {
        if (step == at) request_training_stop();
      };
      REQUIRE(run_training(cut, stop).steps_done == at);
      // killed: a SIGKILL after step 8's record, before any later checkpoint (resumed at 6, record 8
      // cut and made again); stopped: a stop at step 7 with its checkpoint, inside the interval 5..8.
      if (killed) fs::remove_all(cut.job.dump_folder / "checkpoints" / "step-8");
      CHECK(run_training(cut).start_step == (killed ? 6 : 7));
      const std::vector<json> got = all_records(cut.job.dump_folder);
      REQUIRE(kinds_and_steps(got) == kinds_and_steps(want));
      for (size_t i = 0; i < got.size(); ++i)
        for (const auto& [field, value] : want[i].items()) {
          if (field == "tokens_per_s" || field == "step_ms" || field == "memory_mib") continue;  // timing
          CAPTURE(i);
          CAPTURE(field);
          CHECK(got[i].value(field, json()) == value);
        }
    }
  }

  TEST_CASE("a full disk (ENOSPC, /dev/full) stops the run with a checkpoint and exit message; resume loses nothing") {
    if (!fs::exists("/dev/full")) return;
    Config straight = small_job("metrics-full-straight", kEvery4, 6);
    run_training(straight);
    Config full = small_job("metrics-full", kEvery4, 6);
    fs::create_directories(full.job.dump_folder);
    const fs::path file = full.job.dump_folder / "metrics.jsonl";
    fs::create_symlink("/dev/full", file);
    std::string error;
    try {
      run_training(full);
    } catch (const Error& e) {
      error = e.what();
    }
    CHECK(error.find("cannot write " + file.string() + " (" + std::strerror(ENOSPC) + ")") != std::string::npos);
    CHECK(error.find("fix: free space") != std::string::npos);
    // The eval before training failed; step 1 ran and its checkpoint keeps both records.
    REQUIRE(fs::exists(full.job.dump_folder / "checkpoints" / "step-1" / "COMPLETE.json"));
    fs::remove(file);
    CHECK(run_training(full).start_step == 1);
    CHECK(kinds_and_steps(all_records(full.job.dump_folder)) == kinds_and_steps(all_records(straight.job.dump_folder)));
  }
}

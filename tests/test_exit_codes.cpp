// dflash-train's exit status as a scheduler reads it, on the real binary: a training stopped by
// SIGTERM exits 3 after writing its checkpoint, and a second trainer started on a folder in use is
// refused at once (status 1, naming the holder) while the first one's checkpoints and metrics stay
// whole; export onto an export needs --overwrite.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>
#include <thread>

#include "runtime/fileio.h"
#include "tests/process_util.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
// Starts `command` under sh with exec (the signal reaches dflash-train itself); its pid.
pid_t spawn(const std::string& command) {
  return fork_child([&] {
    ::execl("/bin/sh", "sh", "-c", ("exec " + command).c_str(), static_cast<char*>(nullptr));
    return 127;
  });
}

// The steps of the training records of metrics.jsonl, in file order.
std::vector<int64_t> logged_steps(const fs::path& dump) {
  std::vector<int64_t> steps;
  for (const nlohmann::json& r : step_records(dump)) steps.push_back(r.at("step").get<int64_t>());
  return steps;
}

// How many step records a running trainer has written (0 while its last line is half written).
size_t steps_so_far(const fs::path& dump) {
  try {
    return fs::exists(dump / "metrics.jsonl") ? logged_steps(dump).size() : 0;
  } catch (const std::exception&) {
    return 0;
  }
}
}  // namespace

TEST_SUITE("exit-codes") {
  TEST_CASE("dflash-train: SIGTERM stops training with status 3 after its checkpoint; a second trainer on the folder is refused") {
    TempDir tmp("exit-codes");
    const std::string dump = "exit-codes-run";
    const fs::path folder = trainer_root() / dump;
    const fs::path config = tmp / "run.toml";
    std::ofstream(config) << small_job_toml(dump, 1000000);
    const std::string train = sibling_binary("dflash-train") + " train --config " + config.string();
    const fs::path log = tmp / "first.log";
    const pid_t first = spawn(train + " > " + log.string() + " 2>&1");
    struct Reaper {  // a failed REQUIRE leaves no trainer running
      pid_t pid;
      bool reaped = false;
      ~Reaper() {
        if (!reaped) ::kill(pid, SIGKILL), wait_child(pid);
      }
    } reaper{first};
    // Wait until it trains (a step record exists).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(300);
    while (std::chrono::steady_clock::now() < deadline && steps_so_far(folder) < 2)
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    REQUIRE_MESSAGE(steps_so_far(folder) >= 2, read_file_text(log));

    // A second trainer on the same folder: refused at once, writing nothing.
    const bool has_startup = fs::exists(folder / "startup.json");
    const std::string startup = has_startup ? read_file_text(folder / "startup.json") : "";
    const CommandOutput second = run_command(train);
    INFO(second.text);
    CHECK(exit_code(second) == 1);
    CHECK(second.text.find(folder.string() + " is in use by pid " + std::to_string(first) + " on host ") !=
          std::string::npos);
    CHECK(second.text.find("; wait for it, or choose another job.dump_folder") != std::string::npos);
    CHECK(second.text.find("dflash-train: job") == std::string::npos);  // refused before any startup
    if (has_startup) CHECK(read_file_text(folder / "startup.json") == startup);

    // SIGTERM: the checkpoint of the step it stopped after, then status 3.
    ::kill(first, SIGTERM);
    const std::optional<int> code = wait_child_for(first, 120);
    reaper.reaped = true;
    const std::string text = read_file_text(log);
    INFO(text);
    REQUIRE(code.has_value());
    CHECK(*code == 3);
    CHECK(text.find("received SIGTERM at step ") != std::string::npos);
    const std::vector<int64_t> steps = logged_steps(folder);
    REQUIRE_FALSE(steps.empty());
    for (size_t i = 0; i < steps.size(); ++i) CHECK(steps[i] == int64_t(i) + 1);  // each step once, in order
    CHECK(fs::exists(folder / "checkpoints" / ("step-" + std::to_string(steps.back())) / "state.json"));
    CHECK_FALSE(fs::exists(folder / ".lock"));  // released on the way out

    // export onto that export: refused (status 1) unless --overwrite, which replaces it.
    const fs::path out = tmp / "export";
    const std::string exporter = sibling_binary("dflash-train") + " export --checkpoint " +
                                 (folder / "checkpoints" / ("step-" + std::to_string(steps.back()))).string() +
                                 " --out " + out.string();
    CHECK(exit_code(run_command(exporter)) == 0);
    const CommandOutput again = run_command(exporter + " --dtype f32");
    CHECK(exit_code(again) == 1);
    CHECK(again.text.find("--out " + out.string() + " is not empty; fix: pass --overwrite") != std::string::npos);
    CHECK(read_file_text(out / "config.json").find("bfloat16") != std::string::npos);
    CHECK(exit_code(run_command(exporter + " --dtype f32 --overwrite")) == 0);
    CHECK(read_file_text(out / "config.json").find("float32") != std::string::npos);

    // Resumed with a step budget it has reached: done, status 0.
    const CommandOutput done =
        run_command(train + " --training.steps=" + std::to_string(steps.back()));
    INFO(done.text);
    CHECK(exit_code(done) == 0);
  }

  TEST_CASE("dflash-train: --overwrite belongs to export (usage error, status 2)") {
    const CommandOutput o = run_command(sibling_binary("dflash-train") + " prepare --config x.toml --overwrite");
    CHECK(exit_code(o) == 2);
    CHECK(o.text.find("--overwrite belongs to the export command") != std::string::npos);
    CHECK(o.text.find("exit status: 0 done, 1 error, 2 usage error, 3 training stopped by SIGTERM/SIGINT") !=
          std::string::npos);
  }
}

// Experiment trackers (train/trackers.h): the [metrics] tracker keys and their refusals, the
// resolved config the follower reads, finding and running the follower program, and a run whose
// follower program is missing (one warning, training finishes). The follower itself, with real
// TensorBoard and W&B and a killed-and-resumed trainer: python/tests/test_track*.py.
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <set>

#include "runtime/fileio.h"
#include "tests/config_test_util.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/trackers.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

// An executable shell script at `path`.
void write_script(const fs::path& path, const std::string& body) {
  fs::create_directories(path.parent_path());
  std::ofstream(path) << "#!/bin/sh\n" << body << "\n";
  fs::permissions(path, fs::perms::owner_all);
}

// A config that names `trackers`, with its dump folder under `dump`.
Config tracker_config(const fs::path& dump, const std::vector<std::string>& overrides = {}) {
  std::vector<std::string> o = {"job.dump_folder=\"" + dump.string() + "\"", "metrics.trackers=[\"tensorboard\"]"};
  o.insert(o.end(), overrides.begin(), overrides.end());
  return config::parse(config::kMinimal, o);
}

struct Warnings {
  std::vector<std::string> lines;
  LogFn fn() {
    return [this](const std::string& s) { lines.push_back(s); };
  }
};

}  // namespace

TEST_SUITE("trackers") {
  TEST_CASE("[metrics] trackers: none by default; an array or, on the command line, a comma list") {
    const Config none = config::parse(config::kMinimal);
    CHECK(none.metrics.trackers.empty());
    CHECK(none.metrics.wandb_mode.empty());
    CHECK(none.metrics.run_name.empty());

    const Config both = config::parse(config::kMinimal + R"(
[metrics]
trackers = ["tensorboard", "wandb"]
run_name = "first"
wandb_project = "dflash"
wandb_entity = "team"
wandb_mode = "offline"
)");
    CHECK(both.metrics.trackers == std::vector<std::string>{"tensorboard", "wandb"});
    CHECK(both.metrics.run_name == "first");
    CHECK(both.metrics.wandb_project == "dflash");
    CHECK(both.metrics.wandb_entity == "team");
    CHECK(both.metrics.wandb_mode == "offline");

    CHECK(config::parse(config::kMinimal, {"metrics.trackers=tensorboard,wandb"}).metrics.trackers ==
          std::vector<std::string>{"tensorboard", "wandb"});
    CHECK(config::parse(config::kMinimal, {"metrics.trackers=[\"wandb\"]"}).metrics.trackers ==
          std::vector<std::string>{"wandb"});
    CHECK(config::parse(config::kMinimal + "[metrics]\ntrackers = [\"wandb\"]\n", {"metrics.trackers=[]"})
              .metrics.trackers.empty());
    CHECK(config::parse(config::kMinimal, {"metrics.wandb_mode=online"}).metrics.wandb_mode == "online");
  }

  TEST_CASE("[metrics] trackers: an unknown or repeated tracker, a bad mode or a bad type is refused by key, value and fix") {
    REFUSED(config::parse(config::kMinimal + "[metrics]\ntrackers = [\"tensorbord\"]\n"),
            "cfg/x.toml:13:12: metrics.trackers = [\"tensorbord\"]: \"tensorbord\" is not a tracker; the trackers are "
            "\"tensorboard\" and \"wandb\"");
    REFUSED(config::parse(config::kMinimal, {"metrics.trackers=wandb,mlflow"}),
            "cfg/x.toml, overridden on the command line by --metrics.trackers=wandb,mlflow: metrics.trackers = "
            "[\"wandb\", \"mlflow\"]: \"mlflow\" is not a tracker; the trackers are \"tensorboard\" and \"wandb\"");
    REFUSED(config::parse(config::kMinimal + "[metrics]\ntrackers = [\"wandb\", \"wandb\"]\n"),
            "metrics.trackers = [\"wandb\", \"wandb\"]: lists \"wandb\" twice; list each tracker once");
    REFUSED(config::parse(config::kMinimal + "[metrics]\ntrackers = \"wandb\"\n"),
            "cfg/x.toml:13:12: metrics.trackers = \"wandb\": expected an array of quoted strings, got a string; "
            "write e.g. metrics.trackers = [\"tensorboard\"]");
    REFUSED(config::parse(config::kMinimal + "[metrics]\ntrackers = [\"wandb\", 3]\n"),
            "metrics.trackers[1] = 3: expected a quoted string, got an integer; write e.g. metrics.trackers = "
            "[\"tensorboard\"]");
    REFUSED(config::parse(config::kMinimal + "[metrics]\nwandb_mode = \"offlne\"\n"),
            "cfg/x.toml:13:14: metrics.wandb_mode = \"offlne\": use \"online\", \"offline\" (written under "
            "<dump_folder>/wandb, `wandb sync` uploads it later) or \"\" (WANDB_MODE, else online)");
    REFUSED(config::parse(config::kMinimal + "[metrics]\ntracker = [\"wandb\"]\n"),
            "unknown key metrics.tracker; did you mean metrics.trackers?");
  }

  TEST_CASE("config_json: every key nested by section and typed as in TOML, with the buckets") {
    const Config c = config::parse(config::kMinimal, {"metrics.trackers=wandb", "training.lr=0.002"});
    const nlohmann::ordered_json j = config_json(c);
    CHECK(j["training"]["lr"].get<double>() == 0.002);
    CHECK(j["training"]["steps"].get<int64_t>() == 100);
    CHECK(j["training"]["checkpointing"].get<bool>());
    CHECK(j["target"]["path"] == "models/t");
    CHECK(j["target"]["synthetic"]["vocab_size"].is_number_integer());
    CHECK(j["drafter"]["mask_token_id"].get<int64_t>() == 5);
    CHECK(j["metrics"]["trackers"] == nlohmann::ordered_json::array({"wandb"}));
    CHECK(j["metrics"]["wandb_mode"] == "");
    REQUIRE(j["buckets"].size() == 1);
    CHECK(j["buckets"][0]["seq"] == 64);
    CHECK(j["buckets"][0]["batch"] == 2);
    CHECK(j["source"] == "cfg/x.toml");
    size_t leaves = 0;
    for (const std::string& key : config_keys())
      if (key.rfind("buckets.", 0) != 0) ++leaves;
    size_t counted = 0;
    std::function<void(const nlohmann::ordered_json&)> count = [&](const nlohmann::ordered_json& o) {
      for (auto it = o.begin(); it != o.end(); ++it)
        if (it->is_object()) count(*it);
        else ++counted;
    };
    nlohmann::ordered_json sections = j;
    sections.erase("buckets");
    sections.erase("source");
    count(sections);
    CHECK(counted == leaves);
  }

  TEST_CASE("find_track_program: the repository's .venv beside the build folder, else PATH, else nothing") {
    TempDir tmp("trackers-find");
    const fs::path exe_dir = tmp / "repo/build", venv = tmp / "repo/.venv/bin/dflash-data";
    const fs::path on_path = tmp / "bin/dflash-data";
    fs::create_directories(exe_dir);
    const std::string path_env = (tmp / "nothing").string() + ":" + (tmp / "bin").string();
    CHECK(find_track_program(exe_dir, path_env).empty());
    write_script(on_path, "exit 0");
    CHECK(find_track_program(exe_dir, path_env) == on_path);
    write_script(venv, "exit 0");
    CHECK(find_track_program(exe_dir, path_env) == venv);
    fs::permissions(venv, fs::perms::owner_read | fs::perms::owner_write);  // not executable: skipped
    CHECK(find_track_program(exe_dir, path_env) == on_path);
    CHECK(find_track_program(exe_dir, "").empty());
  }

  TEST_CASE("the follower: own process group, its stdin pipe ends at stop(), the resolved config written first") {
    TempDir tmp("trackers-follow");
    const fs::path program = tmp / "bin/dflash-data", args = tmp / "args.txt";
    // Records its arguments and open descriptors, then reads its stdin to the end: it exits when
    // the trainer's pipe closes.
    write_script(program, "echo \"$@\" > " + args.string() + "\nls /proc/$$/fd > " + (tmp / "fds.txt").string() +
                              "\ncat > /dev/null\n");
    const int opened = ::open((tmp / "open-in-trainer").c_str(), O_WRONLY | O_CREAT, 0600);  // no O_CLOEXEC
    const int leaked = ::fcntl(opened, F_DUPFD, 300);
    ::close(opened);
    Warnings w;
    TrackerFollower f(tracker_config(tmp / "dump"), {.program = program}, w.fn());
    REQUIRE(f.pid() > 0);
    CHECK(::getpgid(f.pid()) == f.pid());
    const auto t0 = std::chrono::steady_clock::now();
    f.stop();
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 5);
    CHECK(w.lines.empty());
    CHECK(f.pid() == 0);
    const std::string a = read_file_text(args);
    CHECK(a.find("track --dump-folder " + (tmp / "dump").string() + " --parent-pid " + std::to_string(::getpid())) ==
          0);
    CHECK(a.find("--restart-at") == std::string::npos);
    ::close(leaked);
#if defined(__GLIBC__) && (__GLIBC__ > 2 || (__GLIBC__ == 2 && __GLIBC_MINOR__ >= 34))
    // The trainer's descriptors stay behind: the follower has its stdin (the pipe), stdout and stderr.
    REQUIRE(leaked >= 300);
    CHECK(("\n" + read_file_text(tmp / "fds.txt")).find("\n0\n") != std::string::npos);
    CHECK(("\n" + read_file_text(tmp / "fds.txt")).find("\n" + std::to_string(leaked) + "\n") == std::string::npos);
#endif
    const nlohmann::json cfg = nlohmann::json::parse(read_file_text(tmp / "dump/trackers/config.json"));
    CHECK(cfg["metrics"]["trackers"] == nlohmann::json::array({"tensorboard"}));
    f.stop();  // idempotent
    CHECK(w.lines.empty());

    // checkpoint.resume = false: new tracker runs from metrics.jsonl's current end.
    std::ofstream(tmp / "dump/metrics.jsonl") << "{\"step\": 1, \"loss\": 2.5}\n";
    const size_t size = fs::file_size(tmp / "dump/metrics.jsonl");
    TrackerFollower g(tracker_config(tmp / "dump"), {.restart = true, .program = program}, w.fn());
    g.stop();
    CHECK(read_file_text(args).find("--restart-at " + std::to_string(size)) != std::string::npos);
    CHECK(w.lines.empty());
  }

  TEST_CASE("the follower: a failed one or one still busy is one warning, never an error or a long wait") {
    TempDir tmp("trackers-fail");
    Warnings w;
    // Status 1: the follower explained itself on stderr; any other ending is the trainer's warning.
    for (const char* code : {"1", "5"}) {
      const fs::path failing = tmp / ("bin/exit" + std::string(code));
      write_script(failing, std::string("exit ") + code);
      TrackerFollower f(tracker_config(tmp / "dump"), {.program = failing}, w.fn());
      f.stop();
    }
    REQUIRE(w.lines.size() == 1);
    CHECK(w.lines[0].find("dflash-data track (pid ") == 0);
    CHECK(w.lines[0].find(") ended with status 5 (its messages are above); metrics.jsonl has every record") !=
          std::string::npos);

    w.lines.clear();
    TrackerFollower missing(tracker_config(tmp / "dump"), {.program = tmp / "no/dflash-data"}, w.fn());
    CHECK(missing.pid() == 0);
    REQUIRE(w.lines.size() == 1);
    CHECK(w.lines[0].find("metrics.trackers = [\"tensorboard\"]: the follower program " +
                          (tmp / "no/dflash-data").string() + " is not an executable file; install dflash-data with "
                          "`bash scripts/setup-python.sh`. Training goes on without trackers") == 0);

    w.lines.clear();
    const fs::path stuck = tmp / "bin/stuck";
    write_script(stuck, "exec sleep 30");
    TrackerFollower f(tracker_config(tmp / "dump"), {.program = stuck, .drain_s = 0.3}, w.fn());
    const pid_t pid = f.pid();
    REQUIRE(pid > 0);
    const auto t0 = std::chrono::steady_clock::now();
    f.stop();
    CHECK(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() < 3);
    REQUIRE(w.lines.size() == 1);
    CHECK(w.lines[0].find("is still writing to its trackers after 0.3 s; it goes on by itself") != std::string::npos);
    ::kill(pid, SIGKILL);
    ::waitpid(pid, nullptr, 0);

    // No trackers: no follower and nothing said.
    w.lines.clear();
    CHECK(start_trackers(config::parse(config::kMinimal), {}, w.fn()) == nullptr);
    CHECK(w.lines.empty());
  }

  TEST_CASE("dflash-train with trackers but no dflash-data anywhere: one warning naming the fix, and the run finishes") {
    // A copy of dflash-train in a folder with no .venv beside it, run with an empty PATH.
    TempDir tmp("trackers-missing");
    const fs::path built = fs::canonical("/proc/self/exe").parent_path() / "dflash-train";
    REQUIRE_MESSAGE(fs::exists(built), built.string() << " is missing: build the dflash-train target too");
    fs::create_directories(tmp / "copy/bin");
    fs::create_directories(tmp / "empty");
    fs::copy_file(built, tmp / "copy/bin/dflash-train");
    const fs::path config = tmp / "job.toml", dump = trainer_root() / "trackers-missing-dump", log = tmp / "log.txt";
    write_file_atomic(config, small_job_toml("trackers-missing-dump", 6));
    const std::string cmd = "env PATH=" + (tmp / "empty").string() + " " + (tmp / "copy/bin/dflash-train").string() +
                            " --config " + config.string() + " --metrics.trackers=tensorboard,wandb --data.eval=\"\" " +
                            "--runtime.cpu_workers=1 > " + log.string() + " 2>&1";
    const int status = std::system(cmd.c_str());
    const std::string out = read_file_text(log);
    INFO(out);
    CHECK(WIFEXITED(status));
    CHECK(WEXITSTATUS(status) == 0);
    size_t warnings = 0;
    for (size_t at = out.find("warning:"); at != std::string::npos; at = out.find("warning:", at + 1)) ++warnings;
    CHECK(warnings == 1);
    CHECK(out.find("warning: metrics.trackers = [\"tensorboard\", \"wandb\"]: the follower program dflash-data is "
                   "neither at " + (tmp / "copy/.venv/bin/dflash-data").string() +
                   " nor on PATH; install it with `bash scripts/setup-python.sh`") != std::string::npos);
    const std::vector<nlohmann::json> records = step_records(dump);
    std::set<int64_t> steps;
    for (const auto& r : records) steps.insert(r.at("step").get<int64_t>());
    CHECK(steps == std::set<int64_t>{1, 2, 3, 4, 5, 6});
    CHECK(fs::exists(dump / "checkpoints/step-6"));
  }
}

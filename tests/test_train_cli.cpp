// dflash-train's command line: a flag's value given as --flag=value or as the next argument, and
// --max-new-tokens refused with the usage (status 2) unless it is a whole number of at least 1; an
// empty flag value refused by name.
#include <fstream>
#include <string>

#include "tests/test_util.h"

using namespace dflash::test;

namespace {
// Runs dflash-train (the binary beside this test binary) with ARGS.
CommandOutput train_cli(const std::string& args) { return run_command(sibling_binary("dflash-train") + " " + args); }
}  // namespace

TEST_SUITE("bad-input") {
  TEST_CASE("dflash-train: --config=FILE and --config FILE name the same file") {
    TempDir tmp("train-cli-flag");
    const std::string missing = (tmp / "missing.toml").string();
    for (const std::string& flag : {"--config=" + missing, "--config " + missing}) {
      const CommandOutput o = train_cli("prepare " + flag);
      INFO(flag << ": " << o.text);
      CHECK(exit_code(o) == 1);
      CHECK(o.text.find("dflash-train: error: config file " + missing + " not found") != std::string::npos);
    }
  }

  TEST_CASE("dflash-train spec: --max-new-tokens 0, -3 or 2x, or an empty flag value, is a usage error (status 2), before any work") {
    TempDir tmp("train-cli-max-new");
    const std::string config = (tmp / "spec.toml").string();
    std::ofstream(config) << ("[job]\ndump_folder = \"" + (tmp / "dump").string() + "\"\n[target]\npath = \"" +
                                (golden_dir() / "target-qwen3").string() +
                                "\"\n[drafter]\nnum_hidden_layers = 2\nmask_token_id = 319\n[data]\ntrain = \"" +
                                (golden_spec_dir() / "prompts.jsonl").string() + "\"\n[runtime]\n"
                                "devices = \"cpu\"\n[[buckets]]\nseq = 64\nanchors = 4\nbatch = 1\n");
    const std::string base = "spec --config " + config + " --drafter " + (golden_spec_dir() / "drafter").string();
    for (const std::string v : {"0", "-3", "2x"}) {
      const CommandOutput o = train_cli(base + " --max-new-tokens=" + v);
      INFO(v << ": " << o.text);
      CHECK(exit_code(o) == 2);
      CHECK(o.text.find("--max-new-tokens " + v + ": it must be a whole number of at least 1") != std::string::npos);
      CHECK(o.text.find("usage: dflash-train") != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(tmp / "dump"));  // refused before the job's folder is made
    }
    // An empty value is refused by name, never read as "not given" (the config's value would run).
    for (const std::string flag : {"--max-new-tokens", "--prompts"})
      for (const std::string& form : {flag + "=", flag + " ''"}) {
        const CommandOutput o = train_cli(base + " " + form);
        INFO(form << ": " << o.text);
        CHECK(exit_code(o) == 2);
        CHECK(o.text.find(flag + " has an empty value; write " + flag + " VALUE or " + flag + "=VALUE") !=
              std::string::npos);
        CHECK_FALSE(std::filesystem::exists(tmp / "dump"));
      }
    // The sampling flags set the config's eval.spec_* keys: a value out of range is refused by key,
    // before any work; on another command they are a usage error.
    struct Bad {
      std::string flag, message;
    };
    for (const Bad& b : {Bad{"--temperature=-1", "eval.spec_temperature = -1: must be 0 (greedy) or a temperature in"},
                         Bad{"--top-p=0", "eval.spec_top_p = 0: must be in (0, 1]"},
                         Bad{"--top-k=-2", "eval.spec_top_k = -2: must be at least 0"},
                         Bad{"--seed=-1", "eval.spec_seed"}}) {
      const CommandOutput o = train_cli(base + " " + b.flag);
      INFO(b.flag << ": " << o.text);
      CHECK(exit_code(o) == 1);
      CHECK(o.text.find(b.message) != std::string::npos);
      CHECK_FALSE(std::filesystem::exists(tmp / "dump"));
    }
    const CommandOutput other = train_cli("eval --config " + config + " --drafter x --temperature=0.5");
    CHECK(exit_code(other) == 2);
    CHECK(other.text.find("--temperature, --top-p, --top-k and --seed belong to the spec and generate commands") !=
          std::string::npos);
  }
}

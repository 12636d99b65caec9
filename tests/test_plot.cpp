// Training curves: scripts/plot.py draws loss, accuracy and tau (and spec_tau when the
// records hold it) against the step, train and eval, from the metrics.jsonl of a short run into
// curves.png; its figures are checked against metrics.jsonl read here. Needs python3 with
// matplotlib (Debian's python3-matplotlib, installed by scripts/setup.sh): without it this fails,
// with the script's own message saying so.
#include <cstdio>
#include <fstream>

#include "runtime/fileio.h"
#include "tests/trainer_fixture.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

struct Outcome {
  int rc = -1;
  std::string output;  // stdout and stderr
};

Outcome shell(const std::string& command) {
  const dflash::test::CommandOutput o = dflash::test::run_command(command);
  return {dflash::test::exit_code(o), o.text};
}

std::string plot_command(const std::string& args) {
  return "python3 '" + std::string(DFLASH_SOURCE_DIR) + "/scripts/plot.py' " + args;
}

// Width and height from a PNG's IHDR chunk (read here, independent of the plotting library).
std::pair<uint32_t, uint32_t> png_size(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::string head(24, '\0');
  in.read(head.data(), 24);
  REQUIRE(in.gcount() == 24);
  REQUIRE(head.substr(0, 8) == std::string("\x89PNG\r\n\x1a\n", 8));
  REQUIRE(head.substr(12, 4) == "IHDR");
  auto be32 = [&](size_t at) {
    return uint32_t(uint8_t(head[at])) << 24 | uint32_t(uint8_t(head[at + 1])) << 16 |
           uint32_t(uint8_t(head[at + 2])) << 8 | uint32_t(uint8_t(head[at + 3]));
  };
  return {be32(16), be32(20)};
}

std::vector<json> records(const fs::path& dump, bool eval) {
  std::vector<json> out;
  std::ifstream in(dump / "metrics.jsonl");
  for (std::string line; std::getline(in, line);) {
    json j = json::parse(line);
    if (j.contains("eval") == eval) out.push_back(j);
  }
  return out;
}

// plot.py --json: {"png": path, "series": {"train.loss": {"points", "first_step", "last_step", "last"}, ...}}
json plot_json(const std::string& args) {
  const Outcome o = shell(plot_command(args + " --json"));
  INFO(o.output);
  REQUIRE(o.rc == 0);
  return json::parse(o.output.substr(o.output.rfind("{\"png\"")));
}

}  // namespace

TEST_SUITE("plot") {
  TEST_CASE("the curves of a short run are drawn from its metrics.jsonl into curves.png") {
    Config cfg = small_job("plot-run", {"training.eval_every=2", "metrics.log_every=1"}, 4);
    run_training(cfg);
    const fs::path dump = cfg.job.dump_folder;
    const std::vector<json> steps = records(dump, false), evals = records(dump, true);
    REQUIRE(steps.size() == 4);
    REQUIRE(evals.size() == 3);  // before training, at step 2, after training
    for (const json& e : evals) CHECK(e.contains("step"));

    const json drawn = plot_json("'" + dump.string() + "'");
    CHECK(drawn["png"] == (dump / "curves.png").string());
    CHECK(png_size(dump / "curves.png") == std::pair<uint32_t, uint32_t>{1500, 450});
    const json& s = drawn["series"];
    for (const char* key : {"loss", "accuracy", "tau"}) {
      INFO(std::string(key));
      const json& train = s.at(std::string("train.") + key);
      CHECK(train["points"] == 4);
      CHECK(train["first_step"] == 1);
      CHECK(train["last_step"] == 4);
      CHECK(train["last"].get<double>() == steps.back().at(key).get<double>());
      const json& eval = s.at(std::string("eval.") + key);
      CHECK(eval["points"] == 3);
      CHECK(eval["first_step"] == 0);
      CHECK(eval["last_step"] == 4);
      CHECK(eval["last"].get<double>() == evals.back().at(key).get<double>());
    }
    CHECK_FALSE(s.contains("eval.spec_tau"));

    // spec_tau, when records hold it, is drawn with tau.
    std::string text = read_file_text(dump / "metrics.jsonl");
    text += R"({"eval": "speculative decoding at step 4", "step": 4, "spec_tau": 2.5})" "\n";
    write_file_atomic(dump / "metrics.jsonl", text);
    const json with_spec = plot_json("'" + dump.string() + "'");
    CHECK(with_spec["series"]["eval.spec_tau"]["points"] == 1);
    CHECK(with_spec["series"]["eval.spec_tau"]["last"] == 2.5);
    CHECK(with_spec["series"]["eval.tau"]["points"] == 3);  // the spec record does not replace an eval point

    // The form scripts/train.sh uses: the run folder from the config and its overrides.
    const fs::path toml = trainer_root() / "plot-run.toml";
    write_file_atomic(toml, small_job_toml("plot-run", 4));
    fs::remove(dump / "curves.png");
    const Outcome by_config = shell(plot_command("--config '" + toml.string() + "' --training.steps=9"));
    INFO(by_config.output);
    CHECK(by_config.rc == 0);
    CHECK(by_config.output.find("curves: " + (dump / "curves.png").string()) != std::string::npos);
    CHECK(fs::exists(dump / "curves.png"));
    fs::create_directories(trainer_root() / "plot-elsewhere");
    fs::copy_file(dump / "metrics.jsonl", trainer_root() / "plot-elsewhere" / "metrics.jsonl");
    CHECK(shell(plot_command("--config '" + toml.string() + "' --job.dump_folder=" +
                             (trainer_root() / "plot-elsewhere").string())).rc == 0);
    CHECK(fs::exists(trainer_root() / "plot-elsewhere" / "curves.png"));
  }

  TEST_CASE("plot.py refuses a folder without metrics.jsonl, a damaged line, and a python without matplotlib") {
    const fs::path dir = trainer_root() / "plot-bad";
    fs::create_directories(dir);
    Outcome o = shell(plot_command("'" + dir.string() + "'"));
    CHECK(o.rc == 1);
    CHECK(o.output.find("plot.py: " + (dir / "metrics.jsonl").string() + " not found; fix: pass the run's folder") !=
          std::string::npos);
    write_file_atomic(dir / "metrics.jsonl", std::string("{\"step\": 1, \"loss\": 2.0}\n{\"step\": 2, \"lo\n"));
    o = shell(plot_command("'" + dir.string() + "'"));
    CHECK(o.rc == 1);
    CHECK(o.output.find("metrics.jsonl:2: not a JSON object") != std::string::npos);
    CHECK_FALSE(fs::exists(dir / "curves.png"));

    // A matplotlib that cannot be imported (shadowed on PYTHONPATH): a clear failure, not a skip.
    write_file_atomic(dir / "metrics.jsonl", std::string("{\"step\": 1, \"loss\": 2.0}\n"));
    const fs::path fake = trainer_root() / "fake-python" / "matplotlib";
    fs::create_directories(fake);
    write_file_atomic(fake / "__init__.py", std::string("raise ImportError('no matplotlib here')\n"));
    o = shell("PYTHONPATH='" + fake.parent_path().string() + "' " + plot_command("'" + dir.string() + "'"));
    CHECK(o.rc == 2);
    CHECK(o.output.find("plot.py: matplotlib is not installed for ") != std::string::npos);
    CHECK(o.output.find("fix: bash scripts/setup.sh, which installs Debian's python3-matplotlib") != std::string::npos);
  }
}

// Command-line overrides of the config (--section.key=value): every value type, nested keys and
// whole bucket lists, the last one winning; refusals that name the override; load_config's file errors.
#include <doctest/doctest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "runtime/error.h"
#include "tests/config_test_util.h"
#include "train/config.h"

using namespace dflash;
using namespace dflash::test::config;
namespace fs = std::filesystem;

TEST_SUITE("config") {
  TEST_CASE("overrides: numbers, strings, booleans, nested keys and whole bucket lists") {
    Config c = parse(kMinimal, {"training.lr=3e-4", "training.steps=20", "job.name=foo", "data.train=/a/b.jsonl",
                                "runtime.graphs=false", "runtime.devices=cuda:0,1", "target.synthetic.seed=3",
                                "--metrics.log_every=2", "job.dump_folder=\"out dir\"", "target.layer_ids=[1,3]",
                                "buckets=[{seq=32,anchors=4,batch=2},{seq=128,anchors=8,batch=1}]"});
    CHECK(c.training.lr == 3e-4);
    CHECK(c.training.steps == 20);
    CHECK(c.job.name == "foo");
    CHECK(c.data.train == "/a/b.jsonl");
    CHECK_FALSE(c.runtime.graphs);
    CHECK(c.runtime.devices == "cuda:0,1");
    CHECK(c.target.synthetic.seed == 3);
    CHECK(c.metrics.log_every == 2);
    CHECK(c.job.dump_folder == "out dir");
    CHECK(c.target.layer_ids == std::vector<int64_t>{1, 3});
    REQUIRE(c.buckets.size() == 2);
    CHECK(c.buckets[0].seq == 32);
    CHECK(c.buckets[0].anchors == 4);
    CHECK(c.buckets[0].batch == 2);
    CHECK(c.buckets[1].seq == 128);
    CHECK(c.job.seed == 0);  // untouched keys keep the file's values or defaults
    CHECK(c.drafter.mask_token_id == 5);
    // A string key takes the text as written even when it would parse as another TOML type.
    CHECK(parse(kMinimal, {"job.name=123"}).job.name == "123");
    CHECK(parse(kMinimal, {"job.name=true"}).job.name == "true");
    // The last override of a key wins.
    CHECK(parse(kMinimal, {"training.steps=5", "training.steps=6"}).training.steps == 6);
  }

  TEST_CASE("overrides: unknown keys, bad syntax and invalid values are refused as from the command line") {
    REFUSED(parse(kMinimal, {"training.max_grad_nrm=1"}),
            "cfg/x.toml, command line --training.max_grad_nrm=1: unknown key training.max_grad_nrm; did you mean "
            "training.max_grad_norm?");
    REFUSED(parse(kMinimal, {"trainig.lr=1"}),
            "command line --trainig.lr=1: unknown key trainig.lr; did you mean training.lr?");
    REFUSED(parse(kMinimal, {"training.lr"}),
            "command-line override --training.lr has no value; write --section.key=value");
    REFUSED(parse(kMinimal, {"training={lr=1}"}), "training is a section; override one key at a time");
    REFUSED(parse(kMinimal, {"training.steps=1O"}),
            "cfg/x.toml, overridden on the command line by --training.steps=1O: training.steps = \"1O\": expected an "
            "integer, "
            "got a string (the command-line value is not valid TOML: ");
    REFUSED(parse(kMinimal, {"training.lr=-1"}),
            "cfg/x.toml, overridden on the command line by --training.lr=-1: training.lr = -1: must be greater than 0");
    REFUSED(parse(kMinimal, {"buckets=[{seq=64,anchors=4,batch=2,size=1}]"}),
            "overridden on the command line by --buckets=[{seq=64,anchors=4,batch=2,size=1}]: [[buckets]] #1: unknown "
            "key size");
    REFUSED(
        parse(kMinimal, {"buckets=[{seq=60,anchors=4,batch=2}]"}),
        "overridden on the command line by --buckets=[{seq=60,anchors=4,batch=2}]: [[buckets]] #1 {seq 60, anchors 4, "
        "batch 2}: seq 60 is not a multiple of the block size 16");
    REFUSED(parse(kMinimal, {"buckets=[{seq=64,anchors=4,batch=2}"}), "expected an array of tables, got a string");
    REFUSED(parse(kMinimal, {"drafter.block_size=5"}),
            "cfg/x.toml (with the block size from the command line: --drafter.block_size=5): [[buckets]] #1 {seq 64, "
            "anchors 4, batch 2}: seq 64 is not a multiple of the block size 5");
  }

  TEST_CASE("load_config reads the file and applies overrides; a missing file names its path") {
    fs::path dir = fs::temp_directory_path() / ("dflash-config-test-" + std::to_string(::getpid()));
    fs::create_directories(dir);
    fs::path file = dir / "job.toml";
    std::ofstream(file) << kMinimal;
    Config c = load_config(file, {"training.steps=9"});
    CHECK(c.source == file);
    CHECK(c.training.steps == 9);
    CHECK(c.target.path == "models/t");
    REFUSED(load_config(dir / "nope.toml"), "config file " + (dir / "nope.toml").string() + " not found");
    REFUSED(load_config(dir), "is not a regular file");
    std::ofstream(file) << kMinimal << "[training]\nlr = 0\n";
    REFUSED(load_config(file), file.string() + ":13:6: training.lr = 0: must be greater than 0");
    fs::remove_all(dir);
  }
}

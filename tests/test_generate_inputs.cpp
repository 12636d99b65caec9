// `dflash-train generate` on the CPU: every bad input refused before anything is decoded with a
// message that names the line or key and the fix; resuming (ids already written skipped, a torn
// last line repaired, another configuration refused naming what differs); and the binary under
// torchrun's variables, two ranks writing their parts and the last one merging them.
#include <fstream>

#include "tests/generate_test_util.h"
#include "tests/target_fixtures.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {

struct Tiny {
  TempDir dir{"generate-inputs"};
  fs::path target = write_tiny_target(dir);
  fs::path prompts = write_generate_prompts(dir / "prompts.jsonl", read_golden_generate("greedy").cases);
};

GenerateSummary generate(const Config& cfg, const fs::path& prompts, const fs::path& output, std::string* log = nullptr) {
  GenerateCommandOptions o;
  o.prompts = prompts;
  o.output = output;
  return generate_quietly(cfg, o, log);
}

fs::path write_lines(const fs::path& file, const std::string& text) {
  std::ofstream(file) << text;
  return file;
}

}  // namespace

TEST_SUITE("generate") {
  TEST_CASE("bad prompts are refused before anything runs, naming the line and the fix") {
    CpuRuntime rt;
    Tiny t;
    const Config cfg = generate_config(t.dir, t.target, "", {"generate.max_new_tokens=4"});
    const fs::path out = t.dir / "out.jsonl";
    auto refused = [&](const std::string& text, const std::string& message) {
      CAPTURE(text);
      const fs::path p = write_lines(t.dir / "bad.jsonl", text);
      CHECK_ERROR(generate(cfg, p, out), message);
      CHECK(!fs::exists(out));  // nothing written
    };
    refused("{\"id\": 1, \"prompt_ids\": [1, 2]}\n{\"id\": 2, \"prompt_ids\": [3, 512]}\n",
            "bad.jsonl:2: prompt_ids holds 512 at position 1, outside the target's vocabulary [0, 512); fix: "
            "tokenize with the target's tokenizer");
    refused("{\"id\": 1, \"prompt_ids\": [-1]}\n", "bad.jsonl:1: prompt_ids holds -1 at position 0, outside");
    refused("{\"id\": \"a\", \"prompt_ids\": []}\n",
            "bad.jsonl:1: prompt_ids is empty; fix: give every request at least one token");
    refused("", "holds no prompt; fix: write one {\"id\": ..., \"prompt_ids\": [...]} per line");
    refused("\n\n", "holds no prompt");
    refused("{\"id\": \"x\", \"prompt_ids\": [1]}\n{\"id\": \"y\", \"prompt_ids\": [2]}\n{\"id\": \"x\", "
            "\"prompt_ids\": [3]}\n",
            "bad.jsonl:3: id \"x\" is given twice (first at " + (t.dir / "bad.jsonl").string() + ":1)");
    refused("{\"id\": 1.5, \"prompt_ids\": [1]}\n", "bad.jsonl:1: id 1.5 must be a string or an integer");
    refused("{\"prompt_ids\": [1]}\n", "bad.jsonl:1: needs \"id\" and a \"prompt_ids\" array");
    refused("{\"id\": 1, \"prompt_ids\": [1]\n", "bad.jsonl:1: not valid JSON");
    CHECK_ERROR(generate(cfg, t.dir / "missing.jsonl", out), "missing.jsonl not found; fix: write one");
  }

  TEST_CASE("a prompt beyond the slots' cache or the target's context is refused, naming the line") {
    CpuRuntime rt;
    Tiny t;
    const fs::path out = t.dir / "out.jsonl";
    // The longest golden prompt (line 8) has 48 tokens: 48 + 4 = 52 positions.
    CHECK_ERROR(generate(generate_config(t.dir, t.target, "", {"generate.max_new_tokens=4", "generate.max_length=50"}),
                         t.prompts, out),
                "prompts.jsonl:8: the prompt's 48 tokens plus max_new_tokens 4 = 52 positions, beyond the 50 of each "
                "slot's KV cache; fix: raise generate.max_length");
    fs::path small = t.dir / "small-context";
    fs::create_directories(small);
    for (const char* f : {"model.safetensors", "config.json"}) fs::copy_file(t.target / f, small / f);
    edit_config(small, [](json& j) { j["max_position_embeddings"] = 40; });
    CHECK_ERROR(generate(generate_config(t.dir, small, "", {"generate.max_new_tokens=4"}), t.prompts, out),
                "prompts.jsonl:8: the prompt's 48 tokens plus max_new_tokens 4 = 52 positions, beyond the target's "
                "max_position_embeddings 40; fix: shorten the prompt or lower --max-new-tokens");
    CHECK(!fs::exists(out));
  }

  TEST_CASE("sampling settings outside their ranges are refused, naming the key") {
    TempDir dir("generate-settings");
    const fs::path target = dir / "target";
    auto refused = [&](const std::string& override, const std::string& message) {
      CAPTURE(override);
      CHECK_ERROR(generate_config(dir, target, "", {override}), message);
    };
    refused("generate.temperature=-0.5", "generate.temperature");
    refused("generate.temperature=-0.5", "must be 0 (greedy) or a temperature in (0, 100]");
    refused("generate.top_p=0", "must be in (0, 1]");
    refused("generate.top_p=1.5", "generate.top_p");
    refused("generate.top_k=-1", "generate.top_k");
    refused("generate.batch=0", "generate.batch");
    refused("generate.max_new_tokens=0", "generate.max_new_tokens");
  }

  TEST_CASE("a cache that does not fit is refused at startup with the numbers and the largest batch that fits") {
    CpuRuntime rt;
    Tiny t;
    // 2e6 positions per slot: 2 (k, v) x 4 layers x 2 kv heads x 16 x 4 bytes = 1 KiB a position, 2 GB a slot.
    const Config cfg = generate_config(t.dir, t.target, "", {"generate.max_length=2000000", "generate.batch=100000",
                                                             "generate.max_new_tokens=4"});
    std::string log;
    CHECK_ERROR(generate(cfg, t.prompts, t.dir / "out.jsonl", &log), "generate: --batch 100000 does not fit on cpu:0");
    try {
      generate(cfg, t.prompts, t.dir / "out.jsonl");
    } catch (const Error& e) {
      const std::string m = e.what();
      INFO(m);
      CHECK(m.find("KV caches (100000 slots x 2000000 positions x 4 layers): ") != std::string::npos);
      CHECK(m.find("the largest batch that fits: ") != std::string::npos);
      CHECK(m.find("Nothing was allocated") != std::string::npos);
      CHECK(m.find("fix: lower --batch (generate.batch)") != std::string::npos);
    }
    CHECK(!fs::exists(t.dir / "out.jsonl"));
  }

  TEST_CASE("a rerun skips the ids already written, repairs a torn last line and ends with the same file") {
    CpuRuntime rt;
    Tiny t;
    const Config cfg = generate_config(t.dir, t.target, "", {"generate.max_new_tokens=6", "generate.batch=2"});
    const fs::path whole = t.dir / "whole.jsonl", part = t.dir / "part.jsonl";
    generate(cfg, t.prompts, whole);
    const std::string want = read_generate_output(whole).text;
    // An interrupted run: the header, three records and half of a fourth.
    size_t cut = 0;
    for (int line = 0; line < 4; ++line) cut = want.find('\n', cut) + 1;
    write_lines(part, want.substr(0, cut) + want.substr(cut, 20));
    std::string log;
    const GenerateSummary s = generate(cfg, t.prompts, part, &log);
    INFO(log);
    CHECK(log.find("repaired " + part.string() + ": cut its torn last line (20 bytes") != std::string::npos);
    CHECK(s.skipped == 3);
    CHECK(s.generated == 7);
    CHECK(read_generate_output(part).text == want);
    // Everything written: nothing to decode, the file stays.
    const GenerateSummary again = generate(cfg, t.prompts, part);
    CHECK(again.generated == 0);
    CHECK(again.skipped == 10);
    CHECK(read_generate_output(part).text == want);
  }

  TEST_CASE("an output made with another configuration is refused, naming each difference") {
    CpuRuntime rt;
    Tiny t;
    const fs::path out = t.dir / "out.jsonl";
    generate(generate_config(t.dir, t.target, "", {"generate.max_new_tokens=3"}), t.prompts, out);
    const std::string before = read_generate_output(out).text;
    CHECK_ERROR(generate(generate_config(t.dir, t.target, "", {"generate.max_new_tokens=4", "generate.temperature=0.5"}),
                         t.prompts, out),
                "was generated with other settings, so its records cannot be continued:\n  max_new_tokens: 3 in the "
                "file, 4 now\n  temperature: 0.0 in the file, 0.5 now\nfix: rerun with the settings of the file, or "
                "choose another --output");
    CHECK(read_generate_output(out).text == before);
    write_lines(t.dir / "other.jsonl", "{\"hello\": 1}\n");
    CHECK_ERROR(generate(generate_config(t.dir, t.target, "", {"generate.max_new_tokens=3"}), t.prompts,
                         t.dir / "other.jsonl"),
                "other.jsonl:1: not a dflash-train generate header; fix: choose another --output");
  }

  TEST_CASE("the binary under torchrun's variables: each rank writes its part, the last one merges") {
    Tiny t;
    const Config one = generate_config(t.dir, t.target, "", {"generate.max_new_tokens=5", "generate.batch=4"});
    {
      CpuRuntime rt;
      generate(one, t.prompts, t.dir / "single.jsonl");
    }
    const fs::path toml = t.dir / "generate.toml";
    std::ofstream(toml) << "[job]\ndump_folder = \"" << (t.dir / "dump").string() << "\"\n[target]\npath = \""
                        << t.target.string() << "\"\n[drafter]\nmask_token_id = 511\n[data]\ntrain = \"unused.jsonl\"\n"
                        << "[runtime]\ndevices = \"cpu\"\n[[buckets]]\nseq = 32\nanchors = 4\nbatch = 1\n";
    const fs::path out = t.dir / "ranks.jsonl";
    for (int rank : {0, 1}) {
      const CommandOutput r = run_command("env RANK=" + std::to_string(rank) +
                                          " WORLD_SIZE=2 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 " +
                                          sibling_binary("dflash-train") + " generate --config " + toml.string() +
                                          " --prompts " + t.prompts.string() + " --output " + out.string() +
                                          " --max-new-tokens 5 --batch 4");
      INFO(r.text);
      REQUIRE(exit_code(r) == 0);
      CHECK(r.text.find("generate[rank " + std::to_string(rank) + "/2]: ") != std::string::npos);
      CHECK(fs::exists(out.string() + ".rank-0") == (rank == 0));
    }
    CHECK(read_generate_output(out).text == read_generate_output(t.dir / "single.jsonl").text);
    const CommandOutput usage = run_command(sibling_binary("dflash-train") + " generate --config " + toml.string() +
                                            " --prompts " + t.prompts.string());
    CHECK(exit_code(usage) == 2);
    CHECK(usage.text.find("generate needs --prompts FILE.jsonl") != std::string::npos);
    // The sampling flags set generate.* (spec's set eval.spec_*), checked like the config file.
    const std::string base = sibling_binary("dflash-train") + " generate --config " + toml.string() + " --prompts " +
                             t.prompts.string() + " --output " + (t.dir / "flags.jsonl").string();
    struct Bad {
      std::string flag, message;
    };
    for (const Bad& b : {Bad{"--temperature=-1", "generate.temperature = -1: must be 0 (greedy)"},
                         Bad{"--top-p=1.5", "generate.top_p = 1.5: must be in (0, 1]"},
                         Bad{"--top-k=-1", "generate.top_k = -1: must be at least 0"},
                         Bad{"--batch=0", "generate.batch = 0: must be at least 1"}}) {
      const std::string& flag = b.flag;
      const std::string& message = b.message;
      const CommandOutput o = run_command(base + " " + flag);
      INFO(flag << ": " << o.text);
      CHECK(exit_code(o) == 1);
      CHECK(o.text.find(message) != std::string::npos);
    }
    CHECK(!fs::exists(t.dir / "flags.jsonl"));
    const CommandOutput batch = run_command(sibling_binary("dflash-train") + " spec --config " + toml.string() +
                                            " --drafter x --batch=4");
    CHECK(exit_code(batch) == 2);
    CHECK(batch.text.find("--batch belongs to the generate command") != std::string::npos);
  }
}

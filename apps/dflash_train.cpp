// dflash-train: the command line (docs/USER_GUIDE.md; every key: docs/config.md).
//   dflash-train [train] --config FILE [--section.key=value ...]
//   dflash-train prepare --config FILE [...]       JSONL -> validated token shards
//   dflash-train hidden --config FILE [...]        target features -> hidden-state shards (offline mode)
//   dflash-train eval --config FILE --drafter DIR  every valid anchor of data.eval
//   dflash-train spec --config FILE --drafter DIR [--prompts FILE.jsonl] [--max-new-tokens N]
//                     [--output FILE.jsonl] [--temperature T --top-p P --top-k K --seed S]
//                                                  greedy or sampled speculative decoding: the real tau and speedup
//   dflash-train generate --config FILE --prompts FILE.jsonl --output FILE.jsonl [--max-new-tokens N]
//                     [--temperature T --top-p P --top-k K] [--batch B] [--seed S]
//                                                  regenerate responses with the target, batched and resumable
//   dflash-train export --checkpoint DIR --out DIR [--dtype bf16|f32] [--overwrite]
// Exit status: 0 done; 1 an error; 2 a usage error; 3 training stopped by SIGTERM or SIGINT after
// writing its checkpoint (resume with the same command; a scheduler requeues on it).
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "train/commands.h"
#include "train/generate.h"
#include "train/spec_eval.h"
#include "train/trainer.h"

using namespace dflash;

namespace {
const char* kUsage =
    "usage: dflash-train [train] --config FILE [--section.key=value ...]\n"
    "       dflash-train prepare --config FILE [--section.key=value ...]\n"
    "       dflash-train hidden  --config FILE [--section.key=value ...]\n"
    "       dflash-train eval    --config FILE --drafter DIR [--section.key=value ...]\n"
    "       dflash-train spec    --config FILE --drafter DIR [--prompts FILE.jsonl] [--max-new-tokens N]\n"
    "                            [--output FILE.jsonl] [--temperature T] [--top-p P] [--top-k K] [--seed S]\n"
    "                            [--section.key=value ...]\n"
    "       dflash-train generate --config FILE --prompts FILE.jsonl --output FILE.jsonl [--max-new-tokens N]\n"
    "                            [--temperature T] [--top-p P] [--top-k K] [--batch B] [--seed S]\n"
    "                            [--section.key=value ...]\n"
    "       dflash-train export  --checkpoint DIR --out DIR [--dtype bf16|f32] [--overwrite]\n"
    "exit status: 0 done, 1 error, 2 usage error, 3 training stopped by SIGTERM/SIGINT after its checkpoint\n";

// Training stopped by a signal after writing its checkpoint (docs/USER_GUIDE.md, Slurm recipe).
constexpr int kStoppedStatus = 3;

struct Args {
  std::string command = "train";
  std::string config, drafter, checkpoint, out, dtype = "bf16", prompts, max_new_tokens, output;
  std::vector<std::string> overrides;
  bool overwrite = false;  // export: replace a previous export in --out
  bool sampling = false;  // --temperature, --top-p, --top-k or --seed given (overrides of eval.spec_* or generate.*)
  bool batch = false;     // --batch given (generate.batch)
};

[[noreturn]] void usage_error(const std::string& msg) {
  std::fprintf(stderr, "dflash-train: %s\n%s", msg.c_str(), kUsage);
  std::exit(2);
}

// --max-new-tokens must be a whole number >= 1.
int64_t check_max_new_tokens(const std::string& text) {
  size_t used = 0;
  long long v = 0;
  try {
    v = std::stoll(text, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != text.size() || v < 1) usage_error("--max-new-tokens " + text + ": it must be a whole number of at least 1");
  return v;
}

Args parse(int argc, char** argv) {
  Args a;
  int i = 1;
  if (i < argc && argv[i][0] != '-') a.command = argv[i++];
  if (a.command != "train" && a.command != "prepare" && a.command != "hidden" && a.command != "eval" &&
      a.command != "export" && a.command != "spec" && a.command != "generate")
    usage_error("unknown command '" + a.command + "'");
  // Sampling flags set generate.* for generate, eval.spec_* for spec (and training's spec_tau).
  const bool gen = a.command == "generate";
  auto key = [](bool generate, const std::string& name) {
    return generate ? "generate." + name + "=" : "eval.spec_" + name + "=";
  };
  for (; i < argc; ++i) {
    std::string s = argv[i];
    auto value = [&](const char* flag) -> std::string {  // never empty: "--prompts=" is a usage error
      const std::string f = flag;
      std::string v;
      if (s.rfind(f + "=", 0) == 0) v = s.substr(f.size() + 1);
      else if (i + 1 >= argc) usage_error(f + " needs a value");
      else v = argv[++i];
      if (v.empty()) usage_error(f + " has an empty value; write " + f + " VALUE or " + f + "=VALUE");
      return v;
    };
    if (s == "-h" || s == "--help") {
      std::printf("%s", kUsage);
      std::exit(0);
    } else if (s == "--overwrite") a.overwrite = true;
    else if (s == "--config" || s.rfind("--config=", 0) == 0) a.config = value("--config");
    else if (s == "--drafter" || s.rfind("--drafter=", 0) == 0) a.drafter = value("--drafter");
    else if (s == "--checkpoint" || s.rfind("--checkpoint=", 0) == 0) a.checkpoint = value("--checkpoint");
    else if (s == "--out" || s.rfind("--out=", 0) == 0) a.out = value("--out");
    else if (s == "--dtype" || s.rfind("--dtype=", 0) == 0) a.dtype = value("--dtype");
    else if (s == "--prompts" || s.rfind("--prompts=", 0) == 0) a.prompts = value("--prompts");
    else if (s == "--output" || s.rfind("--output=", 0) == 0) a.output = value("--output");
    else if (s == "--temperature" || s.rfind("--temperature=", 0) == 0)
      a.sampling = true, a.overrides.push_back(key(gen, "temperature") + value("--temperature"));
    else if (s == "--top-p" || s.rfind("--top-p=", 0) == 0) a.sampling = true, a.overrides.push_back(key(gen, "top_p") + value("--top-p"));
    else if (s == "--top-k" || s.rfind("--top-k=", 0) == 0) a.sampling = true, a.overrides.push_back(key(gen, "top_k") + value("--top-k"));
    else if (s == "--seed" || s.rfind("--seed=", 0) == 0) a.sampling = true, a.overrides.push_back(key(gen, "seed") + value("--seed"));
    else if (s == "--batch" || s.rfind("--batch=", 0) == 0) a.batch = true, a.overrides.push_back("generate.batch=" + value("--batch"));
    else if (s == "--max-new-tokens" || s.rfind("--max-new-tokens=", 0) == 0) a.max_new_tokens = value("--max-new-tokens");
    else if (s.rfind("--", 0) == 0 && s.find('=') != std::string::npos) a.overrides.push_back(s.substr(2));
    else usage_error("unexpected argument '" + s + "' (overrides are written --section.key=value)");
  }
  if (a.command == "export") {
    if (a.checkpoint.empty() || a.out.empty()) usage_error("export needs --checkpoint DIR and --out DIR");
  } else if (a.config.empty()) {
    usage_error(a.command + " needs --config FILE");
  }
  if (a.overwrite && a.command != "export") usage_error("--overwrite belongs to the export command");
  if ((a.command == "eval" || a.command == "spec") && a.drafter.empty())
    usage_error(a.command + " needs --drafter DIR (an export or checkpoints/step-N)");
  if (a.command != "spec" && a.command != "generate" &&
      (!a.prompts.empty() || !a.max_new_tokens.empty() || !a.output.empty() || a.sampling))
    usage_error("--prompts, --max-new-tokens, --output, --temperature, --top-p, --top-k and --seed belong to the spec "
                "and generate commands (training's spec_tau reads eval.spec_temperature and the like)");
  if (a.batch && a.command != "generate") usage_error("--batch belongs to the generate command (generate.batch)");
  if (a.command == "generate" && (a.prompts.empty() || a.output.empty()))
    usage_error("generate needs --prompts FILE.jsonl ({\"id\", \"prompt_ids\"} per line) and --output FILE.jsonl");
  if (a.command == "generate" && !a.max_new_tokens.empty()) {
    check_max_new_tokens(a.max_new_tokens);
    a.overrides.push_back("generate.max_new_tokens=" + a.max_new_tokens);
  }
  return a;
}
SpecCommandOptions spec_options(const Args& a) {
  SpecCommandOptions o;
  o.drafter = a.drafter;
  o.prompts = a.prompts;
  o.output = a.output;
  if (!a.max_new_tokens.empty()) o.max_new_tokens = check_max_new_tokens(a.max_new_tokens);
  return o;
}
}  // namespace

int main(int argc, char** argv) {
  Args a = parse(argc, argv);
  try {
    if (a.command == "export") {
      run_export(a.checkpoint, a.out, a.dtype, a.overwrite);
      return 0;
    }
    Config cfg = load_config(a.config, a.overrides);
    if (a.command == "prepare") run_prepare(cfg);
    else if (a.command == "hidden") run_hidden(cfg);
    else if (a.command == "eval") run_eval(cfg, a.drafter);
    else if (a.command == "spec") run_spec(cfg, spec_options(a));
    else if (a.command == "generate") run_generate(cfg, {a.prompts, a.output, std::nullopt, {}, false});
    else if (run_training(cfg).interrupted) return kStoppedStatus;
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "dflash-train: error: %s\n", e.what());
    return 1;
  }
}

// Config parsing: every key into its struct field, defaults (docs/config.md's), and each refusal's message
// (file, line, key, value, fix); docs/config.md and configs/*.toml stay parseable. Overrides:
// test_config_overrides.cpp.
#include <doctest/doctest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include "runtime/error.h"
#include "runtime/target_attention.h"
#include "tests/config_test_util.h"
#include "train/config.h"

using namespace dflash;
using namespace dflash::test::config;
namespace fs = std::filesystem;

namespace {

std::string read_text(const fs::path& p) {
  std::ifstream in(p);
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("a full config fills every section's fields") {
    Config c = parse(R"(
[job]
name = "run1"
dump_folder = "out/run1"
seed = 7
[target]
path = "models/qwen"
layer_ids = [1, 2]
[target.synthetic]
architecture = "llama"
vocab_size = 300
hidden_size = 32
intermediate_size = 96
num_hidden_layers = 3
num_attention_heads = 8
num_key_value_heads = 4
head_dim = 4
rope_theta = 5e5
init_std = 0.05
seed = 11
[drafter]
num_hidden_layers = 2
intermediate_size = 80
num_attention_heads = 4
num_key_value_heads = 1
head_dim = 8
block_size = 8
mask_token_id = 299
loss_decay_gamma = 0
rms_norm_eps = 1e-5
rope_theta = 1000
init_std = 0.01
init = "runs/old/checkpoints/step-10"
[data]
train = "d/train.jsonl"
eval = "d/eval.jsonl"
shards = "d/shards"
mode = "offline"
hidden = "d/hidden"
overflow = "skip"
shuffle_seed = 9
[data.synthetic]
enabled = false
train_sequences = 10
eval_sequences = 0
prompt_length = 4
min_length = 5
max_length = 5
temperature = 0.7
seed = 3
[[buckets]]
seq = 32
anchors = 25
batch = 3
[[buckets]]
seq = 16
anchors = 1
batch = 1
[training]
steps = 1e3
lr = 1
min_lr_ratio = 0.1
warmup_ratio = 1
beta1 = 0
beta2 = 0.999
eps = 1e-6
weight_decay = 0
max_grad_norm = 0
grad_accum = 4
checkpointing = false
eval_every = 50
chunk_rows = 256
[runtime]
devices = "cuda:0,3"
graphs = false
cpu_workers = 2
memory_limit_gb = 40.5
[checkpoint]
every = 25
keep = 1
resume = false
[metrics]
log_every = 1
progress = false
)");
    CHECK(c.source == "cfg/x.toml");
    CHECK(c.job.name == "run1");
    CHECK(c.job.dump_folder == "out/run1");
    CHECK(c.job.seed == 7);
    CHECK(c.target.path == "models/qwen");
    CHECK(c.target.layer_ids == std::vector<int64_t>{1, 2});
    CHECK(c.target.synthetic.enabled);  // the section is in the file
    CHECK(c.target.synthetic.architecture == "llama");
    CHECK(c.target.synthetic.vocab_size == 300);
    CHECK(c.target.synthetic.hidden_size == 32);
    CHECK(c.target.synthetic.intermediate_size == 96);
    CHECK(c.target.synthetic.num_hidden_layers == 3);
    CHECK(c.target.synthetic.num_attention_heads == 8);
    CHECK(c.target.synthetic.num_key_value_heads == 4);
    CHECK(c.target.synthetic.head_dim == 4);
    CHECK(c.target.synthetic.rope_theta == 5e5);
    CHECK(c.target.synthetic.init_std == 0.05);
    CHECK(c.target.synthetic.seed == 11);
    CHECK(c.drafter.num_hidden_layers == 2);
    CHECK(c.drafter.intermediate_size == 80);
    CHECK(c.drafter.num_attention_heads == 4);
    CHECK(c.drafter.num_key_value_heads == 1);
    CHECK(c.drafter.head_dim == 8);
    CHECK(c.drafter.block_size == 8);
    CHECK(c.drafter.mask_token_id == 299);
    CHECK(c.drafter.loss_decay_gamma == 0.0);
    CHECK(c.drafter.rms_norm_eps == 1e-5);
    CHECK(c.drafter.rope_theta == 1000.0);  // an integer where a float is expected
    CHECK(c.drafter.init_std == 0.01);
    CHECK(c.drafter.init == "runs/old/checkpoints/step-10");
    CHECK(c.data.train == "d/train.jsonl");
    CHECK(c.data.eval == "d/eval.jsonl");
    CHECK(c.data.shards == "d/shards");
    CHECK(c.data.mode == "offline");
    CHECK(c.data.hidden == "d/hidden");
    CHECK(c.data.overflow == "skip");
    CHECK(c.data.shuffle_seed == 9);
    CHECK_FALSE(c.data.synthetic.enabled);  // the section says enabled = false
    CHECK(c.data.synthetic.train_sequences == 10);
    CHECK(c.data.synthetic.eval_sequences == 0);
    CHECK(c.data.synthetic.prompt_length == 4);
    CHECK(c.data.synthetic.min_length == 5);
    CHECK(c.data.synthetic.max_length == 5);
    CHECK(c.data.synthetic.temperature == 0.7);
    CHECK(c.data.synthetic.seed == 3);
    REQUIRE(c.buckets.size() == 2);
    CHECK(c.buckets[0].seq == 32);
    CHECK(c.buckets[0].anchors == 25);
    CHECK(c.buckets[0].batch == 3);
    CHECK(c.buckets[1].seq == 16);
    CHECK(c.buckets[1].anchors == 1);
    CHECK(c.training.steps == 1000);  // an integral float where an integer is expected
    CHECK(c.training.lr == 1.0);
    CHECK(c.training.min_lr_ratio == 0.1);
    CHECK(c.training.warmup_ratio == 1.0);
    CHECK(c.training.beta1 == 0.0);
    CHECK(c.training.beta2 == 0.999);
    CHECK(c.training.eps == 1e-6);
    CHECK(c.training.weight_decay == 0.0);
    CHECK(c.training.max_grad_norm == 0.0);
    CHECK(c.training.grad_accum == 4);
    CHECK_FALSE(c.training.checkpointing);
    CHECK(c.training.eval_every == 50);
    CHECK(c.training.chunk_rows == 256);
    CHECK(c.runtime.devices == "cuda:0,3");
    CHECK_FALSE(c.runtime.graphs);
    CHECK(c.runtime.cpu_workers == 2);
    CHECK(c.runtime.memory_limit_gb == 40.5);
    CHECK(c.checkpoint.every == 25);
    CHECK(c.checkpoint.keep == 1);
    CHECK_FALSE(c.checkpoint.resume);
    CHECK(c.metrics.log_every == 1);
    CHECK_FALSE(c.metrics.progress);
  }

  TEST_CASE("absent keys keep the documented defaults") {
    Config c = parse(kMinimal);
    CHECK(c.job.name == "dflash");
    CHECK(c.job.dump_folder == "runs/dflash");
    CHECK(c.job.seed == 0);
    CHECK(c.target.layer_ids.empty());
    CHECK_FALSE(c.target.synthetic.enabled);
    CHECK(c.target.synthetic.architecture == "qwen3");
    CHECK(c.target.synthetic.vocab_size == 256);
    CHECK(c.target.synthetic.num_hidden_layers == 4);
    CHECK(c.target.synthetic.rope_theta == 10000.0);
    CHECK(c.drafter.num_hidden_layers == 1);
    CHECK(c.drafter.intermediate_size == 0);
    CHECK(c.drafter.block_size == 16);
    CHECK(c.drafter.loss_decay_gamma == 7.0);
    CHECK(c.drafter.rms_norm_eps == 1e-6);
    CHECK(c.drafter.rope_theta == 0.0);
    CHECK(c.drafter.init.empty());
    CHECK(c.data.eval.empty());
    CHECK(c.data.mode == "online");
    CHECK(c.data.overflow == "truncate");
    CHECK_FALSE(c.data.synthetic.enabled);
    CHECK(c.data.synthetic.train_sequences == 256);
    CHECK(c.data.synthetic.seed == 1);
    CHECK(c.training.steps == 100);
    CHECK(c.training.lr == 6e-4);
    CHECK(c.training.warmup_ratio == 0.04);
    CHECK(c.training.beta2 == 0.95);
    CHECK(c.training.eps == 1e-8);
    CHECK(c.training.weight_decay == 0.01);
    CHECK(c.training.max_grad_norm == 1.0);
    CHECK(c.training.grad_accum == 1);
    CHECK_FALSE(c.runtime.gemm_tuning);
    CHECK(c.training.checkpointing);
    CHECK(c.training.chunk_rows == 1024);
    CHECK(c.runtime.devices == "auto");
    CHECK(c.runtime.graphs);
    CHECK(c.runtime.cpu_workers == 1);
    CHECK(c.runtime.memory_limit_gb == 0.0);
    CHECK(c.checkpoint.every == 0);
    CHECK(c.checkpoint.keep == 3);
    CHECK(c.checkpoint.resume);
    CHECK(c.metrics.log_every == 10);
    CHECK(c.metrics.progress);
  }

  TEST_CASE("a synthetic section in the file turns its generator on; data.train is then optional") {
    Config c = parse(
        "[target]\npath = \"t\"\n[target.synthetic]\n[drafter]\nmask_token_id = 1\n[data.synthetic]\n"
        "[[buckets]]\nseq = 16\nanchors = 1\nbatch = 1\n");
    CHECK(c.target.synthetic.enabled);
    CHECK(c.data.synthetic.enabled);
    CHECK(c.data.train.empty());
    // An override inside a section absent from the file does not turn the generator on.
    CHECK_FALSE(parse(kMinimal, {"target.synthetic.seed=3"}).target.synthetic.enabled);
    CHECK(parse(kMinimal, {"target.synthetic.enabled=true"}).target.synthetic.enabled);
  }

  TEST_CASE("malformed TOML is refused with toml++'s message and the line:column") {
    REFUSED(parse("[job]\nname = \"a\"\nseed = = 3\n"), "cfg/x.toml:3:");
    REFUSED(parse("[job]\nname = \"a\"\nseed = = 3\n"), "not valid TOML: ");
    REFUSED(parse("[job\n"), "cfg/x.toml:1:");
  }

  TEST_CASE("unknown keys and sections are refused, with the nearest known key") {
    REFUSED(parse(kMinimal + "[training]\nmax_grad_nrm = 1.0\n"),
            "cfg/x.toml:13:1: unknown key training.max_grad_nrm; did you mean training.max_grad_norm?");
    REFUSED(parse(kMinimal + "[training]\nlearning_rate = 1.0\n"),
            "unknown key training.learning_rate; the keys of [training] are steps, lr, min_lr_ratio");
    REFUSED(parse(kMinimal + "[training]\nseed = 1\n"), "unknown key training.seed; did you mean job.seed or");
    REFUSED(parse(kMinimal + "[trainig]\nlr = 1.0\n"), "unknown section [trainig]; did you mean training?");
    REFUSED(parse(kMinimal + "[optimizer]\nlr = 1.0\n"), "unknown section [optimizer]; the sections are buckets, job,");
    REFUSED(parse(kMinimal + "[target.synthetc]\n"),
            "unknown section [target.synthetc]; did you mean target.synthetic?");
    REFUSED(parse("verbose = true\n" + kMinimal), "cfg/x.toml:1:1: unknown key verbose");
    REFUSED(parse("training = 5\n" + kMinimal), "cfg/x.toml:1:12: training = 5 must be a section: write [training]");
  }

  TEST_CASE("wrong types are refused with the expected type and an example") {
    REFUSED(parse(kMinimal + "[training]\nsteps = \"ten\"\n"),
            "cfg/x.toml:13:9: training.steps = \"ten\": expected an integer, got a string; write e.g. training.steps = "
            "100");
    REFUSED(parse(kMinimal + "[training]\nsteps = 2.5\n"), "training.steps = 2.5: expected a whole number");
    REFUSED(parse(kMinimal + "[training]\nlr = \"fast\"\n"),
            "training.lr = \"fast\": expected a number (float or integer), got a string");
    REFUSED(parse(kMinimal + "[training]\nlr = inf\n"), "training.lr = inf: must be a finite number");
    REFUSED(parse(kMinimal + "[runtime]\ngraphs = 1\n"), "runtime.graphs = 1: expected true or false, got an integer");
    REFUSED(parse(kMinimal + "[job]\nname = 3\n"), "job.name = 3: expected a quoted string, got an integer");
    REFUSED(parse(kMinimal + "[job]\nseed = -1\n"), "job.seed = -1: a seed must be 0 or more");
    REFUSED(parse(kMinimal, {"target.layer_ids=[1, \"a\"]"}),
            "target.layer_ids[1] = \"a\": expected an integer, got a string");
    REFUSED(parse(kMinimal, {"target.layer_ids=3"}),
            "target.layer_ids = 3: expected an array of integers, got an integer");
    REFUSED(parse(kMinimal + "[training]\nlr = [1]\n"), "training.lr = [1]: expected a number");
  }

  TEST_CASE("bad values are refused, naming the key, its value and the default") {
    REFUSED(parse(kMinimal + "[training]\nlr = -0.001\n"),
            "cfg/x.toml:13:6: training.lr = -0.001: must be greater than 0 (the default is 0.0006)");
    // One case per constraint class, through overrides (validated exactly like the file).
    const std::vector<std::pair<std::string, std::string>> cases = {
        {"training.steps=0", "training.steps = 0: must be at least 1"},
        {"training.lr=0", "training.lr = 0: must be greater than 0"},
        {"training.beta1=1", "training.beta1 = 1: must be in [0, 1)"},
        {"training.beta2=-0.1", "training.beta2 = -0.1: must be in [0, 1)"},
        {"training.eps=0", "training.eps = 0: must be greater than 0"},
        {"training.weight_decay=-1", "training.weight_decay = -1: must be 0 or more"},
        {"training.max_grad_norm=-1", "training.max_grad_norm = -1: must be 0 or more"},
        {"training.grad_accum=0", "training.grad_accum = 0: must be at least 1"},
        {"training.warmup_ratio=1.5", "training.warmup_ratio = 1.5: must be in [0, 1]"},
        {"training.min_lr_ratio=-0.5", "training.min_lr_ratio = -0.5: must be in [0, 1]"},
        {"training.chunk_rows=0", "training.chunk_rows = 0: must be at least 1"},
        {"training.eval_every=-1", "training.eval_every = -1: must be at least 0"},
        {"runtime.cpu_workers=0", "runtime.cpu_workers = 0: must be at least 1 (the default is 1)"},
        {"runtime.memory_limit_gb=-2", "runtime.memory_limit_gb = -2: must be 0 or more"},
        {"runtime.arena_gb=-1", "runtime.arena_gb = -1: must be 0 or more"},
        {"drafter.block_size=0", "drafter.block_size = 0: must be at least 1"},
        {"drafter.num_hidden_layers=0", "drafter.num_hidden_layers = 0: must be at least 1"},
        {"drafter.loss_decay_gamma=-1", "drafter.loss_decay_gamma = -1: must be 0 or more"},
        {"drafter.rms_norm_eps=0", "drafter.rms_norm_eps = 0: must be greater than 0"},
        {"drafter.head_dim=-1", "drafter.head_dim = -1: must be 0 or more (0 takes the target's)"},
        {"drafter.mask_token_id=-1", "drafter.mask_token_id = -1: must be a token id"},
        {"checkpoint.keep=0", "checkpoint.keep = 0: must be at least 1"},
        {"checkpoint.every=-5", "checkpoint.every = -5: must be at least 0"},
        {"metrics.log_every=0", "metrics.log_every = 0: must be at least 1"},
        {"data.mode=streaming", "data.mode = \"streaming\": use \"online\""},
        {"data.overflow=drop", "data.overflow = \"drop\": use \"truncate\", \"skip\" or \"error\""},
        {"runtime.devices=gpu", "runtime.devices = \"gpu\": use \"auto\", \"cpu\", \"cuda\""},
        {"runtime.devices=cuda:", "runtime.devices = \"cuda:\""},
        {"runtime.devices=cuda:0,0", "runtime.devices = \"cuda:0,0\""},
        {"runtime.devices=cuda:0,", "runtime.devices = \"cuda:0,\""},
        {"runtime.devices=cuda:x", "runtime.devices = \"cuda:x\""},
        {"target.synthetic.architecture=gpt2", "target.synthetic.architecture = \"gpt2\": use \"qwen3\" or \"llama\""},
        {"target.synthetic.vocab_size=0", "target.synthetic.vocab_size = 0: must be at least 1"},
        {"target.synthetic.num_key_value_heads=3", "target.synthetic.num_key_value_heads = 3: must divide"},
        {"target.synthetic.rope_theta=0", "target.synthetic.rope_theta = 0: must be greater than 0"},
        {"data.synthetic.temperature=-0.5", "data.synthetic.temperature = -0.5: must be 0 or more"},
        {"data.synthetic.train_sequences=0", "data.synthetic.train_sequences = 0: must be at least 1"},
        {"data.synthetic.min_length=8", "data.synthetic.min_length = 8: must exceed data.synthetic.prompt_length = 8"},
        {"data.synthetic.max_length=10",
         "data.synthetic.max_length = 10: must be at least data.synthetic.min_length = 24"},
        {"target.layer_ids=[-1]", "target.layer_ids = [-1]: layer ids must be 0 or more"},
        {"target.layer_ids=[2,2]", "target.layer_ids = [2, 2]: lists layer 2 twice"},
        {"job.name=\"\"", "job.name = \"\": must not be empty"},
        {"eval.spec_every=-1", "eval.spec_every = -1: must be at least 0"},
        {"eval.spec_max_new_tokens=0", "eval.spec_max_new_tokens = 0: must be at least 1"},
        {"eval.spec_prefill_chunk=0", "eval.spec_prefill_chunk = 0: must be at least 1"},
        {"eval.spec_stop_token_ids=[2, -1]", "eval.spec_stop_token_ids = [2, -1]: stop ids must be token ids, 0 or more"},
        {"eval.spec_stop_token_ids=[2147483648]", "stop ids must be token ids"},
        {"eval.spec_temperature=-0.1", "eval.spec_temperature = -0.1: must be 0 (greedy) or a temperature in (0, 100]"},
        {"eval.spec_temperature=101", "eval.spec_temperature = 101: must be 0 (greedy)"},
        {"eval.spec_top_p=0", "eval.spec_top_p = 0: must be in (0, 1] (1: no nucleus cut)"},
        {"eval.spec_top_p=1.5", "eval.spec_top_p = 1.5: must be in (0, 1]"},
        {"eval.spec_top_k=-1", "eval.spec_top_k = -1: must be at least 0"},
        {"runtime.rendezvous_port=65536",
         "runtime.rendezvous_port = 65536: must be a TCP port in [1, 65535], or 0 for MASTER_PORT + 1"},
        {"runtime.rendezvous_port=-1", "runtime.rendezvous_port = -1: must be a TCP port"},
        {"runtime.rendezvous_timeout_s=0", "runtime.rendezvous_timeout_s = 0: must be greater than 0"},
        {"runtime.heartbeat_timeout_s=-1", "runtime.heartbeat_timeout_s = -1: must be greater than 0"},
        {"runtime.reduce_dtype=f16", "runtime.reduce_dtype = \"f16\": use \"f32\" (the default) or \"bf16\""},
        {"runtime.kernels=sm90",
         "runtime.kernels = \"sm90\": use \"auto\" (the Hopper kernels on compute capability 9.0 where the build has "
         "them, the default) or \"portable\" (the portable kernels on any GPU) (the default is \"auto\")"},
        {"runtime.target_attention=flash",
         "runtime.target_attention = \"flash\": use \"auto\" (cuDNN where the build has it, the default), \"cudnn\" "
         "(cuDNN's fused flash attention) or \"own\" (dflash's kernel) (the default is \"auto\")"},
    };
    for (const auto& [override, message] : cases) {
      CAPTURE(override);
      REFUSED(parse(kMinimal, {override}), message);
      REFUSED(parse(kMinimal, {override}), "cfg/x.toml, overridden on the command line by --" + override);
    }
    CHECK_NOTHROW(parse(kMinimal, {"runtime.devices=cuda:1,0"}));
    CHECK_NOTHROW(parse(kMinimal, {"runtime.target_attention=own"}));
    CHECK_NOTHROW(parse(kMinimal, {"runtime.kernels=portable"}));
    if (cudnn_attention_built())
      CHECK_NOTHROW(parse(kMinimal, {"runtime.target_attention=cudnn"}));
    else
      REFUSED(parse(kMinimal, {"runtime.target_attention=cudnn"}),
              "runtime.target_attention = \"cudnn\": asks for cuDNN, but this build has no cuDNN path");
    CHECK_NOTHROW(parse(kMinimal, {"runtime.devices=cpu"}));
    // Checks that depend on the synthetic target only when it is on.
    REFUSED(parse(kMinimal, {"target.synthetic.enabled=true", "drafter.mask_token_id=256"}),
            "overridden on the command line by --drafter.mask_token_id=256: drafter.mask_token_id = 256");
    REFUSED(parse(kMinimal, {"target.synthetic.enabled=true", "drafter.mask_token_id=256"}),
            "must be below the synthetic target's vocab_size 256");
    REFUSED(parse(kMinimal, {"target.synthetic.enabled=true", "target.layer_ids=[4]"}), "layer 4 does not exist");
    CHECK_NOTHROW(parse(kMinimal, {"target.layer_ids=[4]", "drafter.mask_token_id=256"}));
    REFUSED(parse(kMinimal, {"runtime.memory_limit_gb=8", "runtime.arena_gb=9"}),
            "runtime.arena_gb = 9: exceeds runtime.memory_limit_gb");
    CHECK_NOTHROW(parse(kMinimal, {"runtime.memory_limit_gb=8", "runtime.arena_gb=8"}));
    CHECK_NOTHROW(parse(kMinimal, {"runtime.arena_gb=100"}));  // without a limit: checked against the device
    CHECK_NOTHROW(parse(kMinimal, {"runtime.rendezvous_port=65535", "eval.spec_stop_token_ids=[2147483647]"}));
    REFUSED(parse(kMinimal, {"eval.spec_stop_token_ids=[2]", "eval.spec_ignore_eos=true"}),
            "eval.spec_ignore_eos = true: contradicts eval.spec_stop_token_ids");
  }

  TEST_CASE("required keys: mask_token_id, target.path, data.train") {
    std::string no_mask =
        "[target]\npath = \"t\"\n[data]\ntrain = \"d\"\n[[buckets]]\nseq = 16\nanchors = 1\nbatch = 1\n";
    REFUSED(parse(no_mask),
            "cfg/x.toml: drafter.mask_token_id is required: pick an id the target's tokenizer never emits "
            "(DFlash adds a mask token; Qwen3's vocabulary has unused ids)");
    CHECK(parse(no_mask, {"drafter.mask_token_id=3"}).drafter.mask_token_id == 3);
    REFUSED(
        parse("[drafter]\nmask_token_id = 1\n[data]\ntrain = \"d\"\n[[buckets]]\nseq = 16\nanchors = 1\nbatch = 1\n"),
        "cfg/x.toml: target.path is required");
    REFUSED(parse("[target]\npath = \"t\"\n[target.synthetic]\n[drafter]\nmask_token_id = 1\n[[buckets]]\nseq = "
                  "16\nanchors = 1\nbatch = 1\n"),
            "cfg/x.toml: data.train is required: a JSONL file or a shard directory");
  }

  TEST_CASE("buckets: entries are checked by name and number, then validated against the block size") {
    std::string head = "[target]\npath = \"t\"\n[drafter]\nmask_token_id = 1\n[data]\ntrain = \"d\"\n";
    REFUSED(parse(head), "cfg/x.toml: no [[buckets]] entries");
    REFUSED(
        parse(head + "[[buckets]]\nseq = 16\nanchors = 1\nbatch = 1\n[[buckets]]\nseq = 32\nanchor = 1\nbatch = 1\n"),
        "cfg/x.toml:11:1: [[buckets]] #2: unknown key anchor; did you mean anchors?");
    REFUSED(parse(head + "[[buckets]]\nseq = 16\nanchors = 1\nbatch = 1\nsize = 9\n"),
            "[[buckets]] #1: unknown key size; a bucket has only seq, anchors and batch");
    REFUSED(parse(head + "[[buckets]]\nseq = 16\nanchors = 1\n"), "cfg/x.toml:7:1: [[buckets]] #1: missing batch");
    REFUSED(parse(head + "[[buckets]]\nseq = \"16\"\nanchors = 1\nbatch = 1\n"),
            "[[buckets]] #1: buckets.seq = \"16\": expected an integer, got a string");
    REFUSED(parse(head + "[buckets]\nseq = 16\nanchors = 1\nbatch = 1\n"),
            "buckets = {anchors = 1, batch = 1, seq = 16}: expected an array of tables, got a table; write e.g. "
            "[[buckets]]");
    REFUSED(parse("buckets = [3]\n" + head), "[[buckets]] #1 = 3 is an integer, not a table");
    REFUSED(parse(head + "[[buckets]]\nseq = 24\nanchors = 1\nbatch = 1\n"),
            "cfg/x.toml: [[buckets]] #1 {seq 24, anchors 1, batch 1}: seq 24 is not a multiple of the block size 16; "
            "use 32");
    // Validated after overrides: a block size from the command line applies to the file's buckets.
    CHECK_NOTHROW(parse(head + "[[buckets]]\nseq = 24\nanchors = 1\nbatch = 1\n", {"drafter.block_size=8"}));
  }

  TEST_CASE("docs/config.md documents every key, and its example parses") {
    std::string docs = read_text(fs::path(DFLASH_SOURCE_DIR) / "docs/config.md");
    REQUIRE_FALSE(docs.empty());
    for (const std::string& key : config_keys()) {
      CAPTURE(key);
      CHECK(docs.find("| `" + key + "` |") != std::string::npos);
    }
    size_t begin = docs.find("```toml\n");
    REQUIRE(begin != std::string::npos);
    begin += 8;
    size_t end = docs.find("```", begin);
    REQUIRE(end != std::string::npos);
    Config c = parse(docs.substr(begin, end - begin));
    CHECK(c.drafter.mask_token_id == 151669);
    CHECK(c.buckets.size() == 2);
    CHECK_FALSE(c.target.synthetic.enabled);
  }

  TEST_CASE("every configs/*.toml in the repository parses") {
    fs::path configs = fs::path(DFLASH_SOURCE_DIR) / "configs";
    int parsed = 0;
    if (fs::is_directory(configs))
      for (const auto& entry : fs::directory_iterator(configs))
        if (entry.path().extension() == ".toml") {
          CAPTURE(entry.path().string());
          CHECK_NOTHROW(load_config(entry.path()));
          ++parsed;
        }
    MESSAGE("parsed " << parsed << " config files under configs/");
  }

  TEST_CASE("absent keys keep docs/config.md's defaults: runtime, eval and optimizer keys") {
    const Config c = parse(kMinimal);
    CHECK(c.runtime.heartbeat_timeout_s == 30.0);
    CHECK(c.runtime.rendezvous_timeout_s == 300.0);
    CHECK(c.runtime.rendezvous_port == 0);
    CHECK_FALSE(c.runtime.shard_optimizer);
    CHECK_FALSE(c.runtime.overlap_reduction);
    CHECK(c.runtime.reduce_dtype == "f32");
    CHECK(c.runtime.target_attention == "auto");
    CHECK(c.runtime.arena_gb == 0.0);
    CHECK(c.training.beta1 == 0.9);
    CHECK(c.training.min_lr_ratio == 0.0);
    CHECK(c.drafter.init_std == 0.02);
    CHECK(c.eval.spec_every == 0);
    CHECK(c.eval.spec_max_new_tokens == 128);
    CHECK(c.eval.spec_prefill_chunk == 128);
    CHECK_FALSE(c.eval.spec_ignore_eos);
  }
}

// Config keys whose effect no other test pins: each test sets keys to values other than their
// defaults and checks what they do against an independent computation, a golden value or a second
// path, never against the code that reads them. Seed keys: changing one changes exactly what it
// seeds. docs/TESTING.md ("Config keys and their mutants") maps every key to the test that catches
// its mutant (scripts/mutants-list.sh).
#include <fcntl.h>
#include <poll.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <fstream>
#include <map>
#include <thread>

#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "tests/micro_batch_gradients.h"
#include "tests/reference_update.h"
#include "tests/spec_test_util.h"
#include "tests/trainer_fixture.h"
#include "train/job.h"
#include "train/sharded_checkpoint.h"
#include "train/spec_eval.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

// The small job with its own target and data (generated from its own seeds) under `tag`, no eval set.
Config own_job(const std::string& tag, std::vector<std::string> more, int64_t steps) {
  const fs::path dir = trainer_root() / ("keys-" + tag);
  std::vector<std::string> o = {"target.path=\"" + (dir / "target").string() + "\"",
                                "data.train=\"" + (dir / "train.jsonl").string() + "\"", "data.eval=\"\"",
                                "training.steps=" + std::to_string(steps)};
  o.insert(o.end(), more.begin(), more.end());
  return small_job("keys-" + tag + "/dump", o, steps);
}

// What one run showed: the records and rank 0's master weights after 0, 1, ... steps.
struct Run {
  std::vector<json> records;
  std::vector<std::vector<float>> weights;
  std::string out;  // stdout
};

Run train(const Config& cfg) {
  Run run;
  TrainHooks hooks;
  hooks.weights = [&run](int64_t, const std::vector<ReplicaWeights>& w) { run.weights.push_back(w[0].master); };
  TrainResult result;  // an exception leaves capture_stdout before doctest reports it
  run.out = capture_stdout([&] { result = run_training(cfg, hooks); });
  REQUIRE(result.steps_done == cfg.training.steps);
  run.records = step_records(cfg.job.dump_folder);
  return run;
}

bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

json read_json(const fs::path& p) { return json::parse(read_file_text(p)); }

// The JSONL data file's sequences as (input_ids, loss_mask), read here without the data code.
std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> jsonl(const fs::path& p) {
  std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> out;
  std::ifstream in(p);
  for (std::string line; std::getline(in, line);)
    if (!line.empty()) {
      json j = json::parse(line);
      out.push_back({j.at("input_ids").get<std::vector<int64_t>>(), j.at("loss_mask").get<std::vector<int64_t>>()});
    }
  return out;
}

// The mean loss of the first step from `start`, through micro-batches of a drafter whose spec the
// test sets directly (`adjust`), not through the key under test (`plain` lacks it).
double first_step_loss(const Config& plain, const std::vector<float>& start,
                       const std::function<void(DrafterSpec&)>& adjust) {
  MicroBatchGradients micro(plain, adjust);
  const int64_t n = plain.training.grad_accum * plain.runtime.cpu_workers;
  double sum = 0;
  for (int64_t j = 0; j < n; ++j) sum += micro.gradient(start, micro.next()).figures.loss;
  return sum / double(n);
}

// Shapes of a checkpoint's parameters.
std::map<std::string, std::vector<int64_t>> shapes(const fs::path& file) {
  SafeTensors st(file);
  std::map<std::string, std::vector<int64_t>> out;
  for (const std::string& n : st.names()) out[n] = st.info(n).shape;
  return out;
}

// ---- seeds: one run per seed setting, each generating its own target and data ----

// What each seed could touch: the target's weights, the generated data, the drafter's initial
// weights, the order of the data (per step: the buckets and the real tokens of its micro-batches).
struct Seeded {
  Config cfg;
  std::string target, data;
  std::vector<float> init;
  std::vector<std::string> order;
  double first_loss = 0;
};

// The base seeds, each unlike the others and its default: job 3, target 7, data 11, shuffle 5.
Seeded seeded(const std::string& tag, const std::string& change = "") {
  std::vector<std::string> seeds = {"job.seed=3", "target.synthetic.seed=7", "data.synthetic.seed=11",
                                    "data.shuffle_seed=5"};
  for (std::string& s : seeds)
    if (!change.empty() && s.substr(0, s.find('=')) == change.substr(0, change.find('='))) s = change;
  Seeded r;
  r.cfg = own_job("seed-" + tag, seeds, 3);
  const Run run = train(r.cfg);
  r.target = read_file_text(r.cfg.target.path / "model.safetensors");
  r.data = read_file_text(r.cfg.data.train);
  r.init = run.weights.at(0);
  for (const json& rec : run.records)
    r.order.push_back(rec.at("bucket").get<std::string>() + "/" + std::to_string(rec.at("tokens").get<int64_t>()));
  r.first_loss = run.records.at(0).at("loss").get<double>();
  return r;
}

const Seeded& base_seeds() {
  static const Seeded base = seeded("base");
  return base;
}

// A pseudo-terminal as stdout while `f` runs; returns what reached it.
template <class F>
std::string on_terminal(const F& f) {
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  REQUIRE(master >= 0);
  REQUIRE(::grantpt(master) == 0);
  REQUIRE(::unlockpt(master) == 0);
  const int slave = ::open(::ptsname(master), O_RDWR | O_NOCTTY);
  REQUIRE(slave >= 0);
  std::string got;
  std::atomic<bool> done{false};
  std::thread reader([&] {  // drains the terminal so that writes never block
    char buf[4096];
    for (;;) {
      pollfd p{master, POLLIN, 0};
      const ssize_t n = ::poll(&p, 1, 20) > 0 ? ::read(master, buf, sizeof buf) : 0;
      if (n > 0) got.append(buf, size_t(n));
      else if (done) break;  // nothing left once stdout is back
    }
  });
  std::fflush(stdout);
  const int saved = ::dup(STDOUT_FILENO);
  ::dup2(slave, STDOUT_FILENO);
  auto restore = [&] {
    std::fflush(stdout);
    ::dup2(saved, STDOUT_FILENO);
    ::close(saved);
    ::close(slave);
    done = true;
    reader.join();
    ::close(master);
  };
  try {
    f();
  } catch (...) {
    restore();
    throw;
  }
  restore();
  return got;
}

}  // namespace

TEST_SUITE("config-keys") {
  TEST_CASE("[target.synthetic]: the written target has every configured size, its architecture, rope base and spread") {
    Config cfg = own_job("synthetic-target",
                         {"target.synthetic.architecture=\"llama\"", "target.synthetic.vocab_size=96",
                          "target.synthetic.hidden_size=24", "target.synthetic.intermediate_size=40",
                          "target.synthetic.num_hidden_layers=2", "target.synthetic.num_attention_heads=6",
                          "target.synthetic.num_key_value_heads=3", "target.synthetic.head_dim=8",
                          "target.synthetic.rope_theta=5000", "target.synthetic.init_std=0.3",
                          "drafter.num_hidden_layers=1"},
                         1);
    setup_job(cfg, [](const std::string&) {});
    const json c = read_json(cfg.target.path / "config.json");
    CHECK(c.at("model_type") == "llama");
    CHECK(c.at("architectures") == json({"LlamaForCausalLM"}));
    CHECK(c.at("vocab_size") == 96);
    CHECK(c.at("hidden_size") == 24);
    CHECK(c.at("intermediate_size") == 40);
    CHECK(c.at("num_hidden_layers") == 2);
    CHECK(c.at("num_attention_heads") == 6);
    CHECK(c.at("num_key_value_heads") == 3);
    CHECK(c.at("head_dim") == 8);
    CHECK(c.at("rope_theta").get<double>() == 5000.0);
    // The tensors as a Llama checkpoint of those sizes holds them (no q/k norms).
    const auto s = shapes(cfg.target.path / "model.safetensors");
    CHECK(s.at("model.embed_tokens.weight") == std::vector<int64_t>{96, 24});
    CHECK(s.at("lm_head.weight") == std::vector<int64_t>{96, 24});
    CHECK(s.at("model.layers.1.self_attn.q_proj.weight") == std::vector<int64_t>{48, 24});
    CHECK(s.at("model.layers.1.self_attn.k_proj.weight") == std::vector<int64_t>{24, 24});
    CHECK(s.at("model.layers.1.mlp.down_proj.weight") == std::vector<int64_t>{24, 40});
    CHECK(s.count("model.layers.2.input_layernorm.weight") == 0);
    CHECK(s.count("model.layers.0.self_attn.q_norm.weight") == 0);
    // Weights ~ N(0, 0.3^2): the sample deviation of the 96 * 24 embedding values within 10 %.
    const std::vector<float> e = SafeTensors(cfg.target.path / "model.safetensors").read_floats("model.embed_tokens.weight");
    double ss = 0;
    for (float x : e) ss += double(x) * double(x);
    CHECK(std::sqrt(ss / double(e.size())) == doctest::Approx(0.3).epsilon(0.1));
  }

  TEST_CASE("[data.synthetic]: the generated sets have the configured counts, prompt length and length range") {
    Config cfg = own_job("synthetic-data",
                         {"data.eval=\"" + (trainer_root() / "keys-synthetic-data" / "eval.jsonl").string() + "\"",
                          "data.synthetic.train_sequences=13", "data.synthetic.eval_sequences=5",
                          "data.synthetic.prompt_length=3", "data.synthetic.min_length=7",
                          "data.synthetic.max_length=9"},
                         1);
    Job job = setup_job(cfg, [](const std::string&) {});
    open_train_data(job, [](const std::string&) {});
    open_eval_data(job, [](const std::string&) {});
    const auto train = jsonl(cfg.data.train), eval = jsonl(cfg.data.eval);
    CHECK(train.size() == 13);
    CHECK(eval.size() == 5);
    for (const auto* set : {&train, &eval})
      for (const auto& [ids, mask] : *set) {
        CHECK(ids.size() >= 7);
        CHECK(ids.size() <= 9);
        REQUIRE(mask.size() == ids.size());
        for (size_t i = 0; i < mask.size(); ++i) CHECK(mask[i] == (i < 3 ? 0 : 1));
      }
  }

  TEST_CASE("job.seed changes the drafter's initial weights and the anchors, not the target, the data or their order") {
    const Seeded& base = base_seeds();
    const Seeded other = seeded("job", "job.seed=4");
    CHECK(other.init != base.init);
    CHECK(other.target == base.target);
    CHECK(other.data == base.data);
    CHECK(other.order == base.order);
    // The anchors: the first step's loss is that of the micro-batches staged with job.seed 4's anchors
    // (tests/micro_batch_gradients.h), not with job.seed 3's, at the same weights.
    Config three = other.cfg;
    three.job.seed = 3;
    CHECK(other.first_loss == first_step_loss(other.cfg, other.init, {}));
    CHECK(other.first_loss != first_step_loss(three, other.init, {}));
  }

  TEST_CASE("data.shuffle_seed changes the order of the micro-batches, not the weights, the target or the data") {
    const Seeded& base = base_seeds();
    const Seeded other = seeded("shuffle", "data.shuffle_seed=6");
    CHECK(other.order != base.order);
    CHECK(other.init == base.init);
    CHECK(other.target == base.target);
    CHECK(other.data == base.data);
    // The order is the plan of data.shuffle_seed 6: the first step's loss is that of its micro-batches.
    CHECK(other.first_loss == first_step_loss(other.cfg, other.init, {}));
  }

  TEST_CASE("target.synthetic.seed changes the target's weights (and the data it generates), not the drafter's") {
    const Seeded& base = base_seeds();
    const Seeded other = seeded("target", "target.synthetic.seed=8");
    CHECK(other.target != base.target);
    CHECK(other.init == base.init);
  }

  TEST_CASE("data.synthetic.seed changes the generated data, not the target or the drafter's weights") {
    const Seeded& base = base_seeds();
    const Seeded other = seeded("data", "data.synthetic.seed=12");
    CHECK(other.data != base.data);
    CHECK(other.target == base.target);
    CHECK(other.init == base.init);
  }

  TEST_CASE("drafter sizes: the checkpoint's tensors have the shapes the layers, heads, head_dim and MLP width give") {
    // The target: H 32, 2 heads, 1 KV head, head_dim 16, MLP 64, 3 layers; the drafter's own sizes differ.
    Config cfg = small_job("keys-drafter-sizes",
                           {"training.steps=1", "data.eval=\"\"", "drafter.num_hidden_layers=3",
                            "drafter.num_attention_heads=4", "drafter.num_key_value_heads=2", "drafter.head_dim=8",
                            "drafter.intermediate_size=48", "target.layer_ids=[0,1,2]"},
                           1);
    train(cfg);
    const auto s = shapes(cfg.job.dump_folder / "checkpoints" / "step-1" / "params.safetensors");
    using V = std::vector<int64_t>;
    CHECK(s.at("fc.weight") == V{32, 96});
    CHECK(s.at("layers.2.self_attn.q_proj.weight") == V{32, 32});  // 4 heads of 8
    CHECK(s.at("layers.2.self_attn.k_proj.weight") == V{16, 32});  // 2 heads of 8
    CHECK(s.at("layers.2.self_attn.o_proj.weight") == V{32, 32});
    CHECK(s.at("layers.2.self_attn.q_norm.weight") == V{8});
    CHECK(s.at("layers.2.mlp.gate_proj.weight") == V{48, 32});
    CHECK(s.at("layers.2.mlp.down_proj.weight") == V{32, 48});
    CHECK(s.count("layers.3.input_layernorm.weight") == 0);
  }
}

namespace {
// The key's first-step loss is that of micro-batches through a drafter whose spec is set directly
// (`set`), and unlike that of the spec the config gives without the key.
void check_spec_key(const std::string& tag, const std::vector<std::string>& base, const std::string& key,
                    const std::function<void(DrafterSpec&)>& set) {
  std::vector<std::string> with = base;
  with.insert(with.end(), {"training.steps=1", key});
  std::vector<std::string> without = base;
  without.push_back("training.steps=1");
  const Run run = train(small_job("keys-" + tag, with, 1));
  const Config plain = small_job("keys-" + tag, without, 1);
  const double logged = run.records.at(0).at("loss").get<double>();
  CHECK(logged == first_step_loss(plain, run.weights.at(0), set));
  CHECK(logged != first_step_loss(plain, run.weights.at(0), {}));
}

const std::vector<std::string> kNoEval = {"data.eval=\"\""};
}  // namespace

TEST_SUITE("config-keys") {
  TEST_CASE("drafter.rms_norm_eps: the first step's loss is that of a drafter built with it") {
    check_spec_key("rms-norm-eps", kNoEval, "drafter.rms_norm_eps=0.5", [](DrafterSpec& s) { s.rms_norm_eps = 0.5; });
  }

  TEST_CASE("drafter.loss_decay_gamma: the first step's loss is that of a drafter built with it") {
    check_spec_key("gamma", kNoEval, "drafter.loss_decay_gamma=1.5", [](DrafterSpec& s) { s.loss_decay_gamma = 1.5; });
  }

  TEST_CASE("drafter.block_size: the first step's loss is that of a drafter and batches built with it") {
    check_spec_key("block-size", kNoEval, "drafter.block_size=8", [](DrafterSpec& s) { s.block_size = 8; });
  }

  TEST_CASE("drafter.mask_token_id: the first step's loss is that of a drafter built with it") {
    // Its own data: generation leaves the mask token out, and the shared data keep the default job's.
    const std::vector<std::string> base = {
        "data.eval=\"\"", "data.train=\"" + (trainer_root() / "keys-mask-data" / "train.jsonl").string() + "\""};
    check_spec_key("mask-token", base, "drafter.mask_token_id=5", [](DrafterSpec& s) { s.mask_token_id = 5; });
  }

  TEST_CASE("target.layer_ids: the first step's loss is that of a drafter fed by those layers") {
    // The default for 3 target layers and 2 drafter layers is [1, 0].
    check_spec_key("layer-ids", kNoEval, "target.layer_ids=[0,2]",
                   [](DrafterSpec& s) { s.target_layer_ids = {0, 2}; });
  }

  TEST_CASE("drafter.init_std scales the drafter's initial weights; the norms stay 1") {
    const Run a = train(small_job("keys-init-std-a", {"training.steps=1", "data.eval=\"\"", "drafter.init_std=0.5"}, 1));
    const Run b = train(small_job("keys-init-std-b", {"training.steps=1", "data.eval=\"\"", "drafter.init_std=0.05"}, 1));
    const std::vector<float>&x = a.weights.at(0), &y = b.weights.at(0);
    REQUIRE(x.size() == y.size());
    // One seed, one stream: every normal draw N(0, s^2) = s * z scales with s, here by 10.
    int64_t scaled = 0, wrong = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      if (y[i] == 1.0f || y[i] == 0.0f) {  // a norm's weight, or padding
        wrong += x[i] != y[i];
      } else {
        wrong += std::abs(double(x[i]) - 10.0 * double(y[i])) > 1e-6 * std::abs(double(x[i]));
        ++scaled;
      }
    }
    CHECK(wrong == 0);
    CHECK(scaled > int64_t(x.size()) / 2);
  }

  TEST_CASE("training.lr, beta1, beta2, eps, weight_decay, max_grad_norm: two steps equal the reference update") {
    Config cfg = small_job("keys-adamw",
                           {"training.steps=2", "data.eval=\"\"", "training.grad_accum=1", "runtime.cpu_workers=1",
                            "training.warmup_ratio=0", "training.min_lr_ratio=1", "training.lr=0.02",
                            "training.beta1=0.5", "training.beta2=0.8", "training.eps=1e-4",
                            "training.weight_decay=0.2", "training.max_grad_norm=0.25"},
                           2);
    const Run run = train(cfg);
    MicroBatchGradients micro(cfg);
    reference::Hyper h;  // the values above, written out (docs/MODEL.md's update, tests/reference_update.h)
    h.lr = 0.02, h.min_lr_ratio = 1, h.warmup_ratio = 0, h.beta1 = 0.5, h.beta2 = 0.8, h.eps = 1e-4;
    h.weight_decay = 0.2, h.max_grad_norm = 0.25, h.steps = 2;
    reference::State state;
    for (int64_t s = 1; s <= 2; ++s) {
      CAPTURE(s);
      const std::vector<float>& before = run.weights.at(size_t(s - 1));
      const reference::Outcome want = reference::step(h, state, before, {micro.gradient(before, micro.next()).grad}, s);
      CHECK(want.clip < 0.9);  // the premise: the clip binds
      CHECK(run.records.at(size_t(s - 1)).at("lr").get<double>() == doctest::Approx(want.lr).epsilon(1e-6));
      const std::vector<float>& after = run.weights.at(size_t(s));
      REQUIRE(after.size() == want.params.size());
      double worst = 0;  // as tests/test_trainer_reference.cpp: rounding only, 1e-3 of the step's lr
      for (size_t i = 0; i < after.size(); ++i)
        worst = std::max(worst, (std::abs(double(after[i]) - want.params[i]) - 1e-6 * std::abs(want.params[i])) / want.lr);
      CHECK(worst <= 1e-3);
    }
  }

  TEST_CASE("training.checkpointing = false: no program recomputes, and the arena is the largest one without it") {
    const Config on = small_job("keys-ckpt-on", {"training.steps=1", "data.eval=\"\""}, 1);
    const Config off = small_job("keys-ckpt-off", {"training.steps=1", "data.eval=\"\"", "training.checkpointing=false"}, 1);
    train(on);
    train(off);
    const json a = read_json(on.job.dump_folder / "startup.json"), b = read_json(off.job.dump_folder / "startup.json");
    int64_t recomputed = 0, without = 0;
    for (const json& p : a.at("buckets")) {
      recomputed += p.at("recomputed_segments").get<int64_t>();
      without = std::max(without, p.at("arena_bytes_without_checkpointing").get<int64_t>());
    }
    REQUIRE(recomputed > 0);  // the premise: with checkpointing the smallest arena recomputes
    for (const json& p : b.at("buckets")) CHECK(p.at("recomputed_segments").get<int64_t>() == 0);
    CHECK(b.at("arena_bytes").get<int64_t>() == without);
  }

  TEST_CASE("training.chunk_rows: chunks of 8 rows need less arena than one chunk of all rows, for the same loss") {
    // The logits of a chunk ([chunk rows, V]) live through the loss: every training program without
    // recomputation needs less arena with 8-row chunks than with one chunk of its 18 or 24 rows.
    const Config whole = small_job("keys-chunk-whole", {"training.steps=1", "data.eval=\"\""}, 1);
    const Config eight = small_job("keys-chunk-8", {"training.steps=1", "data.eval=\"\"", "training.chunk_rows=8"}, 1);
    const Run a = train(whole), b = train(eight);
    const json sa = read_json(whole.job.dump_folder / "startup.json"), sb = read_json(eight.job.dump_folder / "startup.json");
    REQUIRE(sa.at("buckets").size() == 2);
    REQUIRE(sb.at("buckets").size() == 2);
    for (size_t i = 0; i < 2; ++i)
      CHECK(sb.at("buckets")[i].at("arena_bytes_without_checkpointing").get<int64_t>() <
            sa.at("buckets")[i].at("arena_bytes_without_checkpointing").get<int64_t>());
    CHECK(b.records.at(0).at("loss").get<double>() == doctest::Approx(a.records.at(0).at("loss").get<double>()).epsilon(1e-6));
  }

  TEST_CASE("runtime.graphs = false: eager steps, nothing recorded, the recorded run's losses") {
    const Config rec = small_job("keys-graphs-on", {"training.steps=2", "data.eval=\"\""}, 2);
    const Config eager = small_job("keys-graphs-off", {"training.steps=2", "data.eval=\"\"", "runtime.graphs=false"}, 2);
    const Run a = train(rec), b = train(eager);
    CHECK(contains(b.out, "eager mode (runtime.graphs = false): nothing recorded"));
    CHECK_FALSE(contains(a.out, "eager mode"));
    CHECK(fs::exists(rec.job.dump_folder / "startup.json"));
    CHECK_FALSE(fs::exists(eager.job.dump_folder / "startup.json"));
    REQUIRE(b.records.size() == 2);
    for (size_t i = 0; i < 2; ++i)
      CHECK(b.records[i].at("loss").get<double>() == doctest::Approx(a.records[i].at("loss").get<double>()).epsilon(1e-5));
  }

  TEST_CASE("runtime.shard_optimizer over two CPU workers: a sharded checkpoint, less persistent memory per worker") {
    const Config plain = small_job("keys-shard-off", {"training.steps=1", "data.eval=\"\""}, 1);
    const Config sharded = small_job("keys-shard-on", {"training.steps=1", "data.eval=\"\"", "runtime.shard_optimizer=true"}, 1);
    train(plain);
    train(sharded);
    CHECK(is_sharded_checkpoint(sharded.job.dump_folder / "checkpoints" / "step-1"));
    CHECK_FALSE(is_sharded_checkpoint(plain.job.dump_folder / "checkpoints" / "step-1"));
    const json a = read_json(plain.job.dump_folder / "startup.json"), b = read_json(sharded.job.dump_folder / "startup.json");
    CHECK(b.at("persistent_bytes").get<int64_t>() < a.at("persistent_bytes").get<int64_t>());
  }

  TEST_CASE("runtime.devices = \"cpu\" and runtime.cpu_workers = 3: three CPU workers, named by the key") {
    RuntimeConfig rt;
    rt.devices = "cpu";
    rt.cpu_workers = 3;
    std::string note;
    const std::vector<Device> d = resolve_devices(rt, &note);
    REQUIRE(d.size() == 3);
    for (int i = 0; i < 3; ++i) CHECK(d[size_t(i)] == Device::cpu(i));
    CHECK(note == "runtime.devices = \"cpu\"");
  }

  TEST_CASE("job.name names the run in its log and checkpoint; the data come from data.train") {
    const Config cfg = small_job("keys-name", {"training.steps=1", "data.eval=\"\"", "job.name=\"keyname\""}, 1);
    const Run r = train(cfg);
    CHECK(contains(r.out, "dflash-train: job 'keyname', dump folder " + cfg.job.dump_folder.string()));
    CHECK(read_json(cfg.job.dump_folder / "checkpoints" / "step-1" / "state.json").at("job") == "keyname");
    int64_t tokens = 0;
    const auto seqs = jsonl(cfg.data.train);
    for (const auto& s : seqs) tokens += int64_t(s.first.size());
    CHECK(contains(r.out, "data: " + std::to_string(seqs.size()) + " training sequences (" + std::to_string(tokens) +
                              " tokens) from " + cfg.data.train.string()));
  }

  TEST_CASE("data.overflow = \"skip\": the planner skips every sequence longer than the largest bucket") {
    const Config cfg = small_job("keys-overflow",
                                 {"training.steps=1", "data.eval=\"\"", "data.overflow=\"skip\"",
                                  "buckets=[{seq=16,anchors=2,batch=3}]"},
                                 1);
    const Run r = train(cfg);
    int64_t longer = 0;
    for (const auto& s : jsonl(cfg.data.train)) longer += int64_t(s.first.size()) > 16;
    REQUIRE(longer > 0);
    CHECK(contains(r.out, "(data.overflow = \"skip\"): 0 truncated, " + std::to_string(longer) + " skipped"));
  }

  TEST_CASE("runtime.overlap_reduction over CPU workers: startup says that the update reduces") {
    const Run on = train(small_job("keys-overlap", {"training.steps=1", "data.eval=\"\"", "runtime.overlap_reduction=true"}, 1));
    CHECK(contains(on.out, "runtime.overlap_reduction applies to GPUs: on the CPU the update reduces"));
  }

  TEST_CASE("metrics.progress: a progress line on a terminal when on, none when off") {
    for (bool on : {true, false}) {
      CAPTURE(on);
      const Config cfg = small_job(std::string("keys-progress-") + (on ? "on" : "off"),
                                   {"training.steps=2", "data.eval=\"\"", std::string("metrics.progress=") + (on ? "true" : "false")},
                                   2);
      const std::string tty = on_terminal([&] { run_training(cfg); });
      CHECK(contains(tty, "dflash-train: job 'test'"));  // the log reached the terminal
      CHECK(contains(tty, "\r\033[K") == on);            // a progress status, cleared
      CHECK(contains(tty, "step 2/2  loss") == on);
    }
  }
}

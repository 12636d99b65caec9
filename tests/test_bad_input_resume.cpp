// Bad input around checkpoints: resume refuses a checkpoint of another run, naming each
// differing key with both values (drafter shape, block size, mask token, target layers, another
// target by its embedding/lm_head checksum); resume refuses NaN/Inf parameters and Adam moments,
// naming the tensor; pruning never costs the newest checkpoint that verifies; drafter.init on a
// folder that is neither an export nor a checkpoint says what the key expects; a damaged sharded
// checkpoint (its manifest, its shards) is refused naming the file and the fix, and stays on disk.
#include <cstring>
#include <functional>
#include <limits>
#include <map>

#include "model/target.h"
#include "tests/capture_output.h"
#include "tests/checkpoint_io_util.h"
#include "tests/trainer_fixture.h"
#include "train/run_identity.h"
#include "train/sharded_checkpoint.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;
namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {

std::string error_of_training(const Config& cfg) {
  try {
    run_training(cfg);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// A finished 2-step run in its own dump folder (checkpoint at step 2).
fs::path trained_run(const std::string& dump) {
  static std::map<std::string, fs::path> done;
  if (!done.count(dump)) done[dump] = run_training(small_job(dump, {}, 2)).last_checkpoint;
  return done[dump];
}

// Overwrites the f32 element `index` of tensor `name` in a safetensors file in place (offsets
// from the reader, bytes written with plain iostreams).
void poke_float(const fs::path& file, const std::string& name, size_t index, float value) {
  size_t at;  // from the start of the data section
  {
    SafeTensors st(file);
    REQUIRE(st.info(name).dtype == "F32");
    at = st.info(name).offset;
  }
  std::string bytes = read_raw(file);
  uint64_t header = 0;
  std::memcpy(&header, bytes.data(), 8);
  std::memcpy(bytes.data() + 8 + header + at + index * sizeof(float), &value, sizeof value);
  write_raw(file, bytes);
}

// A copy of the fixture's target in `name`, with `edit` applied to its config.json and weights.
fs::path copy_target(const std::string& name, const std::function<void(json&)>& edit_config,
                     const std::function<void(std::string&)>& edit_weights = {}) {
  const fs::path src = trainer_root() / "target", dst = trainer_root() / name;
  fs::remove_all(dst);
  fs::create_directories(dst);
  json c = json::parse(read_raw(src / "config.json"));
  edit_config(c);
  write_raw(dst / "config.json", c.dump(2));
  std::string weights = read_raw(src / "model.safetensors");
  if (edit_weights) edit_weights(weights);
  write_raw(dst / "model.safetensors", weights);
  return dst;
}

}  // namespace

TEST_SUITE("bad-input-resume") {
  TEST_CASE("resume refuses a checkpoint of another drafter shape, block size, mask token or layer ids, by key") {
    const fs::path ckpt = trained_run("ident");
    REQUIRE(json::parse(read_raw(ckpt / "state.json")).contains("identity"));
    struct Case {
      std::vector<std::string> overrides;
      std::vector<std::string> expect;
    };
    const std::vector<Case> cases = {
        {{"drafter.num_hidden_layers=1"}, {"drafter.num_hidden_layers = 2 in the checkpoint, 1 now"}},
        {{"drafter.block_size=8"}, {"drafter.block_size = 4 in the checkpoint, 8 now"}},
        {{"drafter.mask_token_id=62"}, {"drafter.mask_token_id = 63 in the checkpoint, 62 now"}},
        {{"target.layer_ids=[0, 2]"}, {"target.layer_ids = [1,0] in the checkpoint, [0,2] now"}},
        {{"drafter.intermediate_size=32", "drafter.num_attention_heads=1"},
         {"(2 differences)", "drafter.intermediate_size = 64 in the checkpoint, 32 now",
          "drafter.num_attention_heads = 2 in the checkpoint, 1 now"}},
    };
    for (const Case& c : cases) {
      std::vector<std::string> overrides = c.overrides;
      overrides.push_back("training.steps=4");
      Config cfg = small_job("ident", overrides, 4);
      CaptureFd out(1);
      const std::string msg = error_of_training(cfg);
      const std::string log = out.text();
      INFO(c.overrides[0] << ": " << msg);
      CHECK(msg.find("resuming from '" + ckpt.string() + "': the checkpoint was made for another run") !=
            std::string::npos);
      for (const std::string& e : c.expect) CHECK(msg.find(e) != std::string::npos);
      CHECK(msg.find("shape") == std::string::npos);  // the key is named, not a tensor shape
      CHECK(msg.find("fix:") != std::string::npos);
      CHECK(log.find("recorded programs") == std::string::npos);  // refused before startup
    }
    // Unchanged, the same run resumes.
    CHECK(run_training(small_job("ident", {"training.steps=3"}, 3)).start_step == 2);
  }

  TEST_CASE("resume tells targets apart by their weights, not by their config.json") {
    const fs::path ckpt = trained_run("ident-target");
    // The same weights under another path, with a config.json edit that computes nothing new.
    const fs::path same = copy_target("target-same", [](json& c) { c["transformers_version"] = "4.51.0"; });
    Config ok = small_job("ident-target", {"training.steps=3", "target.path=" + same.string()}, 3);
    CHECK(run_training(ok).start_step == 2);

    // A fine-tune: the same config.json, one lm_head value changed.
    const fs::path tuned = copy_target("target-tuned", [](json&) {});
    poke_float(tuned / "model.safetensors", "lm_head.weight", 7, 0.125f);
    Config other = small_job("ident-target", {"training.steps=4", "target.path=" + tuned.string()}, 4);
    const std::string msg = error_of_training(other);
    INFO(msg);
    CHECK(msg.find("(1 difference): target.lm_head.crc32 = \"") != std::string::npos);
    CHECK(msg.find("\" in the checkpoint, \"") != std::string::npos);

    // Another architecture's dims: a different hidden size is named as the target's key.
    SyntheticTargetConfig t;
    t.vocab_size = 64;
    t.hidden_size = 48;
    t.intermediate_size = 64;
    t.num_hidden_layers = 3;
    t.num_attention_heads = 2;
    t.num_key_value_heads = 1;
    t.head_dim = 16;
    const fs::path wide = trainer_root() / "target-wide";
    fs::remove_all(wide);
    write_random_target(wide, t);
    const std::string wider = error_of_training(small_job("ident-target", {"training.steps=4", "target.path=" + wide.string()}, 4));
    CHECK(wider.find("target.hidden_size = 32 in the checkpoint, 48 now") != std::string::npos);
    CHECK(wider.find("drafter.hidden_size = 32 in the checkpoint, 48 now") != std::string::npos);
  }

  TEST_CASE("the identity tells apart targets that differ only in the embedding or a llama3 rope factor") {
    TempDir dir("ident-unit");
    const DrafterSpec d = small_spec();
    TargetSpec t;
    t.architecture = TargetArch::llama;
    t.hidden_size = 8, t.intermediate_size = 16, t.num_hidden_layers = 4, t.num_attention_heads = 2;
    t.num_key_value_heads = 1, t.head_dim = 4, t.vocab_size = 32, t.rope_theta = 5e5;
    t.rope_type = RopeType::llama3;
    t.rope_factor = 8, t.rope_low_freq_factor = 1, t.rope_high_freq_factor = 4;
    t.rope_original_max_position_embeddings = 8192;
    const TargetChecksums sums{"11111111", "22222222"};
    json state;
    state[kIdentityKey] = json::parse(run_identity(d, t, sums).dump());
    write_raw(dir / "state.json", state.dump());
    auto refusal = [&](const TargetSpec& now, const TargetChecksums& now_sums) {
      return error_of([&] { check_resume_identity(dir.path, json::parse(run_identity(d, now, now_sums).dump()),
                                              [](const std::string&) {}); });
    };
    CHECK(refusal(t, sums).empty());
    // A fine-tune of the embedding alone (an untied target's lm_head unchanged).
    const std::string embed = refusal(t, {"33333333", "22222222"});
    CHECK(embed.find("(1 difference): target.embed_tokens.crc32 = \"11111111\" in the checkpoint, \"33333333\" now") !=
          std::string::npos);
    // Each llama3 factor changes every position's rope: another target.
    const std::vector<std::pair<std::function<void(TargetSpec&)>, std::string>> rope = {
        {[](TargetSpec& x) { x.rope_factor = 16; }, "target.rope_factor = 8.0 in the checkpoint, 16.0 now"},
        {[](TargetSpec& x) { x.rope_low_freq_factor = 2; }, "target.rope_low_freq_factor = 1.0 in the checkpoint, 2.0 now"},
        {[](TargetSpec& x) { x.rope_high_freq_factor = 3; }, "target.rope_high_freq_factor = 4.0 in the checkpoint, 3.0 now"},
        {[](TargetSpec& x) { x.rope_original_max_position_embeddings = 4096; },
         "target.rope_original_max_position_embeddings = 8192 in the checkpoint, 4096 now"},
    };
    for (const auto& [edit, text] : rope) {
      TargetSpec other = t;
      edit(other);
      const std::string msg = refusal(other, sums);
      INFO(msg);
      CHECK(msg.find("(1 difference): " + text) != std::string::npos);
    }
  }

  TEST_CASE("a checkpoint saved without an identity is checked on its drafter config, with a warning") {
    const fs::path ckpt = trained_run("ident-old");
    json state = json::parse(read_raw(ckpt / "state.json"));
    state.erase("identity");
    write_raw(ckpt / "state.json", state.dump(2));
    reseal(ckpt);
    const std::string msg = error_of_training(small_job("ident-old", {"training.steps=4", "drafter.block_size=8"}, 4));
    CHECK(msg.find("drafter.block_size = 4 in the checkpoint, 8 now") != std::string::npos);
    CaptureFd err(2);
    CHECK(run_training(small_job("ident-old", {"training.steps=3"}, 3)).start_step == 2);
    CHECK(err.text().find("records no run identity (it was saved by an older build)") != std::string::npos);
  }

  TEST_CASE("resume refuses NaN parameters and Inf Adam moments, naming the tensor") {
    const fs::path nan_ckpt = trained_run("nan-param");
    poke_float(nan_ckpt / "params.safetensors", "fc.weight", 3, std::nanf(""));
    reseal(nan_ckpt);
    const std::string nan_msg = error_of_training(small_job("nan-param", {"training.steps=4"}, 4));
    INFO(nan_msg);
    CHECK(nan_msg.find("load_checkpoint '" + nan_ckpt.string() + "'") != std::string::npos);
    CHECK(nan_msg.find("tensor 'fc.weight' (F32[32,64]) holds NaN at index 3") != std::string::npos);
    CHECK(nan_msg.find("diverged at step") == std::string::npos);

    const fs::path inf_ckpt = trained_run("inf-moment");
    poke_float(inf_ckpt / "optimizer.safetensors", "v.layers.1.mlp.down_proj.weight", 0,
               std::numeric_limits<float>::infinity());
    reseal(inf_ckpt);
    const std::string inf_msg = error_of_training(small_job("inf-moment", {"training.steps=4"}, 4));
    INFO(inf_msg);
    CHECK(inf_msg.find("tensor 'v.layers.1.mlp.down_proj.weight' (F32[32,64]) holds +Inf at index 0") !=
          std::string::npos);
    CHECK(inf_msg.find("nothing was loaded") != std::string::npos);
  }

  TEST_CASE("load_checkpoint with a non-finite moment changes nothing") {
    CpuRuntime rt;
    TempDir dir("nonfinite");
    const DrafterSpec spec = small_spec();
    Trained a(spec, 1, 1);
    std::vector<float> m = a.opt.adam_m().to_floats();
    m[0] = -std::numeric_limits<float>::infinity();
    a.opt.adam_m().copy_from_host(m.data(), m.size() * sizeof(float));
    save_checkpoint(dir.path, 1, a.params, a.opt, json::object());
    Trained b(spec, 7, 1);
    const Snapshot before(b);
    CHECK_THROWS_WITH_AS(load_checkpoint(checkpoint_dir(dir.path, 1), b.params, b.opt),
                         doctest::Contains("holds -Inf at index 0"), Error);
    check_same(before, Snapshot(b));
  }

  TEST_CASE("pruning never removes the newest checkpoint that verifies") {
    CpuRuntime rt;
    TempDir dir("prune-verify");
    const DrafterSpec spec = small_spec();
    Trained a(spec, 1, 1);
    save_checkpoint(dir.path, 1, a.params, a.opt, json::object());
    a.step();
    save_checkpoint(dir.path, 2, a.params, a.opt, json::object());
    a.step();
    save_checkpoint(dir.path, 3, a.params, a.opt, json::object());
    // Step 3 is damaged after writing: one flipped bit, same size (what a read-back catches).
    const fs::path p3 = checkpoint_dir(dir.path, 3) / "params.safetensors";
    std::string bytes = read_raw(p3);
    bytes[bytes.size() - 5] ^= 0x04;
    write_raw(p3, bytes);

    std::vector<std::string> warnings;
    prune_checkpoints(dir.path, 2, &warnings);
    CHECK(listing(dir / "checkpoints") == std::vector<std::string>{"step-1", "step-2", "step-3"});
    REQUIRE(warnings.size() == 1);
    CHECK(warnings[0].find("checkpoint '" + checkpoint_dir(dir.path, 3).string() + "' does not verify") !=
          std::string::npos);
    CHECK(warnings[0].find("params.safetensors has checksum crc32") != std::string::npos);

    prune_checkpoints(dir.path, 1);
    CHECK(listing(dir / "checkpoints") == std::vector<std::string>{"step-2", "step-3"});  // step-2 is the good one
    CHECK(latest_complete_checkpoint(dir.path) == checkpoint_dir(dir.path, 2));

    // A good newer checkpoint takes over; the older ones then go.
    a.step();
    save_checkpoint(dir.path, 4, a.params, a.opt, json::object());
    prune_checkpoints(dir.path, 1);
    CHECK(listing(dir / "checkpoints") == std::vector<std::string>{"step-4"});
  }

  TEST_CASE("a damaged sharded checkpoint is refused naming its file and the fix, and is left as it was") {
    const std::vector<std::string> sharded = {"runtime.shard_optimizer=true"};
    const fs::path good = run_training(small_job("shard-damage", sharded, 2)).last_checkpoint;
    REQUIRE(is_sharded_checkpoint(good));
    const json manifest = json::parse(read_raw(good / "manifest.json"));
    REQUIRE(manifest.at("parameters").size() >= 2);
    REQUIRE(manifest.at("shards").size() == 2);  // runtime.cpu_workers = 2: one shard a rank
    const std::string first = manifest["parameters"][0]["name"].get<std::string>();
    const std::string second_shard = manifest["shards"][1]["file"].get<std::string>();
    struct Damage {
      std::string name;
      std::function<void(json&)> edit;  // on the manifest; null: the manifest is not JSON at all
      std::vector<std::string> expect;
      std::string named = "manifest.json";  // the file the error names, in the checkpoint folder
    };
    const std::vector<Damage> damages = {
        {"not-json", nullptr, {"is not valid JSON (", "fix: use another checkpoint"}},
        {"version", [](json& m) { m["version"] = 7; },
         {"is not a version 1 dflash-sharded-checkpoint manifest", "fix: use a checkpoint written by this build"}},
        {"no-shards-key", [](json& m) { m.erase("shards"); }, {"is malformed (", "fix: use another checkpoint"}},
        {"no-shards", [](json& m) { m["shards"] = json::array(); }, {"lists no shards"}},
        {"one-parameter-less", [](json& m) { m["parameters"].erase(m["parameters"].begin()); },
         {"lists " + std::to_string(manifest["parameters"].size() - 1) + " parameters but the model has " +
              std::to_string(manifest["parameters"].size()),
          "fix: resume with the drafter config the checkpoint was saved with"}},
        {"renamed", [](json& m) { m["parameters"][0]["name"] = "layers.9.unknown"; },
         {"has no parameter '" + first + "'", "fix: resume with the drafter config"}},
        {"moved", [](json& m) { m["parameters"][0]["offset"] = m["parameters"][0]["offset"].get<int64_t>() + 4; },
         {"parameter '" + first + "' is ", "but the model's is", "fix: resume with the drafter config"}},
        {"short-shard", [](json& m) { m["shards"][1]["count"] = m["shards"][1]["count"].get<int64_t>() - 1; },
         {"has no F32 tensor 'master' of ", "fix: the checkpoint is damaged; use another one"}, second_shard},
    };
    for (const Damage& d : damages) {
      const std::string dump = "shard-damage-" + d.name;
      const fs::path root = trainer_root() / dump;
      fs::remove_all(root);
      fs::copy(good.parent_path().parent_path(), root, fs::copy_options::recursive);
      const fs::path ckpt = root / "checkpoints" / good.filename(), file = ckpt / "manifest.json";
      if (d.edit) {
        json m = manifest;
        d.edit(m);
        write_raw(file, m.dump(2));
      } else {
        write_raw(file, "{\"format\": ");
      }
      reseal(ckpt);  // the damage is in the content, not in the checksums
      const std::string before = read_raw(file), sealed = read_raw(ckpt / "COMPLETE.json");
      std::vector<std::string> overrides = sharded;
      overrides.push_back("training.steps=4");
      const std::string msg = error_of_training(small_job(dump, overrides, 4));
      INFO(d.name << ": " << msg);
      CHECK(msg.find("'" + (ckpt / d.named).string() + "'") != std::string::npos);
      for (const std::string& e : d.expect) CHECK(msg.find(e) != std::string::npos);
      // Nothing lost: the checkpoint is as it was, and no newer one appeared.
      CHECK(read_raw(file) == before);
      CHECK(read_raw(ckpt / "COMPLETE.json") == sealed);
      CHECK(listing(root / "checkpoints") == std::vector<std::string>{good.filename().string()});
    }
    // The undamaged checkpoint resumes.
    std::vector<std::string> overrides = sharded;
    overrides.push_back("training.steps=3");
    CHECK(run_training(small_job("shard-damage", overrides, 3)).start_step == 2);
  }

  TEST_CASE("drafter.init on a folder that is neither an export nor a checkpoint says what the key expects") {
    const fs::path weights_only = trainer_root() / "init-weights-only";
    fs::create_directories(weights_only);
    write_raw(weights_only / "model.safetensors", "not read");
    Config cfg = small_job("init-bad", {"drafter.init=" + weights_only.string()}, 2);
    CaptureFd out(1);
    const std::string msg = error_of_training(cfg);
    const std::string log = out.text();
    INFO(msg);
    CHECK(msg.find("drafter.init = \"" + weights_only.string() + "\": it is neither an exported drafter (a folder "
                   "with config.json + model.safetensors, written by `dflash-train export`) nor a checkpoints/step-N "
                   "folder of a run: it has no config.json (only model.safetensors) and no COMPLETE.json") !=
          std::string::npos);
    CHECK(log.find("recorded programs") == std::string::npos);  // refused before startup

    const fs::path run = trained_run("init-run").parent_path().parent_path();
    const std::string from_run = error_of_training(small_job("init-bad", {"drafter.init=" + run.string()}, 2));
    CHECK(from_run.find("the newest complete checkpoint here is '" + (run / "checkpoints" / "step-2").string() + "'") !=
          std::string::npos);
    const std::string missing = error_of_training(small_job("init-bad", {"drafter.init=" + (run / "nope").string()}, 2));
    CHECK(missing.find("drafter.init = \"" + (run / "nope").string() + "\": the folder does not exist; it must be an "
                       "exported drafter") != std::string::npos);
    // A checkpoint folder is accepted.
    CHECK(run_training(small_job("init-ok", {"drafter.init=" + (run / "checkpoints" / "step-2").string()}, 2)).steps_done == 2);
  }
}

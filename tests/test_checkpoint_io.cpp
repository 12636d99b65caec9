// Training checkpoints: CRC-32 against a bitwise reference, bitwise save/load round trips (params,
// Adam m/v, step, state), damaged and incomplete checkpoints skipped with warnings, replacement and
// pruning (only canonical step-N names count), forced write failures; a grown file named by the marker,
// a v moment of another shape refused on load.
#include "tests/checkpoint_io_util.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;
namespace fs = std::filesystem;
using json = nlohmann::json;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

TEST_SUITE("checkpoint-io") {

TEST_CASE("CRC-32: the standard check value and a bit-at-a-time reference at every length and alignment") {
  CHECK(crc32("123456789", 9) == 0xcbf43926u);
  CHECK(crc32(nullptr, 0) == 0u);
  CHECK(crc32_hex(0xcbf43926u) == "cbf43926");
  CHECK(crc32_hex(0x0000abcdu) == "0000abcd");
  std::vector<uint8_t> data(300);
  std::mt19937_64 rng(7);
  for (auto& b : data) b = uint8_t(rng());
  for (size_t offset = 0; offset < 8; ++offset)
    for (size_t n = 0; n + offset <= 150; n += 1 + n / 8) {
      INFO("offset " << offset << " length " << n);
      CHECK(crc32(data.data() + offset, n) == reference_crc32(data.data() + offset, n));
    }
  Crc32 inc;
  inc.update(data.data(), 13);
  inc.update(data.data() + 13, 200);
  inc.update(data.data() + 213, 87);
  CHECK(inc.value() == reference_crc32(data.data(), data.size()));

  TempDir dir;
  write_raw(dir / "f", std::string(data.begin(), data.end()));
  CHECK(crc32_file(dir / "f") == reference_crc32(data.data(), data.size()));
  const std::string missing = (dir / "missing").string();
  CHECK_THROWS_WITH_AS(crc32_file(dir / "missing"), doctest::Contains(missing.c_str()), Error);
  CHECK_THROWS_WITH_AS(crc32_file(dir.path), doctest::Contains("checksum: reading '"), Error);
}

TEST_CASE("save, latest and load restore params, Adam m and v, the step and the state bitwise") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 1, 2);
  const json state = {{"data", {{"epoch", 1}, {"offset", 12345}}}, {"rng", "0123456789abcdef"}, {"name", "grün"}};
  save_checkpoint(dir.path, 2, a.params, a.opt, state, &spec);

  const fs::path step2 = dir / "checkpoints" / "step-2";
  CHECK(listing(dir / "checkpoints") == std::vector<std::string>{"step-2"});
  CHECK(listing(step2) == std::vector<std::string>{"COMPLETE.json", "drafter_config.json", "optimizer.safetensors",
                                                   "params.safetensors", "state.json"});
  const json marker = json::parse(read_raw(step2 / "COMPLETE.json"));
  CHECK(marker["format"] == "dflash-checkpoint");
  CHECK(marker["version"] == 1);
  CHECK(marker["step"] == 2);
  REQUIRE(marker["files"].size() == 4);
  for (const json& f : marker["files"]) {
    const std::string bytes = read_raw(step2 / f["name"].get<std::string>());
    CHECK(f["bytes"] == bytes.size());
    CHECK(f["crc32"] == crc32_hex(reference_crc32(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size())));
  }
  // params.safetensors holds the masters under their exported names.
  SafeTensors values(step2 / "params.safetensors");
  CHECK(values.names().size() == a.params.specs().size());
  CHECK(bitwise_equal(values.read_floats("fc.weight"), a.params.master("fc.weight").to_floats()));

  std::vector<std::string> warnings;
  auto latest = latest_complete_checkpoint(dir.path, &warnings);
  REQUIRE(latest);
  CHECK(*latest == step2);
  CHECK(warnings.empty());

  Trained b(spec, 100, 0);
  const json got = load_checkpoint(*latest, b.params, b.opt);
  CHECK(got == state);
  check_same(Snapshot(a), Snapshot(b));
  // Resuming continues exactly: the same gradients give the same next step.
  b.seed = a.seed;
  a.step();
  b.step();
  check_same(Snapshot(a), Snapshot(b));
}

TEST_CASE("incomplete and damaged checkpoints are skipped with a warning and never loaded") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 1, 0);
  for (int64_t s = 1; s <= 3; ++s) {
    a.step();
    save_checkpoint(dir.path, s, a.params, a.opt, {{"step", s}});
  }
  const fs::path ck = dir / "checkpoints";
  CHECK(latest_complete_checkpoint(dir / "elsewhere") == std::nullopt);

  auto latest = [&](std::vector<std::string>& warnings) {
    warnings.clear();
    return latest_complete_checkpoint(dir.path, &warnings);
  };
  std::vector<std::string> w;

  // A crash mid-save: a step directory without the marker, and a leftover staging directory.
  fs::create_directories(ck / "step-5");
  fs::copy_file(ck / "step-3" / "params.safetensors", ck / "step-5" / "params.safetensors");
  fs::copy(ck / "step-3", ck / ".tmp-step-4-999999");
  REQUIRE(latest(w) == ck / "step-3");
  REQUIRE(w.size() == 2);
  CHECK(w[0].find("ignoring '" + (ck / ".tmp-step-4-999999").string() + "'") != std::string::npos);
  CHECK(w[0].find("interrupted save") != std::string::npos);
  CHECK(w[1].find("skipping checkpoint '" + (ck / "step-5").string() + "': no COMPLETE.json") != std::string::npos);
  fs::remove_all(ck / ".tmp-step-4-999999");
  fs::remove_all(ck / "step-5");

  // A copy under another step's name.
  fs::copy(ck / "step-3", ck / "step-9");
  REQUIRE(latest(w) == ck / "step-3");
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("says step 3 but the directory is step-9") != std::string::npos);
  fs::remove_all(ck / "step-9");

  // A flipped byte in the newest.
  {
    std::string bytes = read_raw(ck / "step-3" / "params.safetensors");
    bytes[bytes.size() - 3] ^= 0x10;
    write_raw(ck / "step-3" / "params.safetensors", bytes);
  }
  REQUIRE(latest(w) == ck / "step-2");
  REQUIRE(w.size() == 1);
  CHECK(w[0].find("skipping checkpoint '" + (ck / "step-3").string() + "'") != std::string::npos);
  CHECK(w[0].find("params.safetensors has checksum crc32") != std::string::npos);
  CHECK(w[0].find("(the file is damaged)") != std::string::npos);
  Trained b(spec, 50, 0);
  const Snapshot before(b);
  CHECK_THROWS_WITH_AS(load_checkpoint(ck / "step-3", b.params, b.opt),
                       doctest::Contains("not a complete checkpoint: params.safetensors has checksum"), Error);
  check_same(before, Snapshot(b));

  // A truncated file in the next.
  const uintmax_t size = fs::file_size(ck / "step-2" / "optimizer.safetensors");
  fs::resize_file(ck / "step-2" / "optimizer.safetensors", size - 4);
  REQUIRE(latest(w) == ck / "step-1");
  REQUIRE(w.size() == 2);
  CHECK(w[1].find("optimizer.safetensors has " + std::to_string(size - 4) + " bytes but COMPLETE.json records " +
                  std::to_string(size)) != std::string::npos);

  // A missing file in the last: nothing complete is left.
  fs::remove(ck / "step-1" / "state.json");
  CHECK(latest(w) == std::nullopt);
  REQUIRE(w.size() == 3);
  CHECK(w[2].find("state.json is missing") != std::string::npos);

  // A marker that is not JSON.
  write_raw(ck / "step-1" / "COMPLETE.json", "{not json");
  CHECK(latest(w) == std::nullopt);
  CHECK(w[2].find("COMPLETE.json is not valid JSON") != std::string::npos);

  // checkpoints/ that is a file is an error, not "no checkpoint".
  TempDir other;
  write_raw(other / "checkpoints", "x");
  CHECK_THROWS_WITH_AS(latest_complete_checkpoint(other.path), doctest::Contains("is not a directory"), Error);
}

TEST_CASE("load_checkpoint refuses another model's checkpoint, naming file, key and shapes, and changes nothing") {
  CpuRuntime rt;
  TempDir dir;
  Trained a(small_spec(), 1, 1);
  save_checkpoint(dir.path, 1, a.params, a.opt, json::object());
  const fs::path step1 = dir / "checkpoints" / "step-1";

  DrafterSpec wider = small_spec();
  wider.intermediate_size = 24;
  Trained b(wider, 7, 0);
  const Snapshot before(b);
  const std::string e = error_of([&] { load_checkpoint(step1, b.params, b.opt); });
  CHECK(e.find((step1 / "params.safetensors").string()) != std::string::npos);
  CHECK(e.find("tensor 'layers.0.mlp.gate_proj.weight' has shape [16,8] but the model's parameter is [24,8]") !=
        std::string::npos);
  CHECK(e.find("fix:") != std::string::npos);
  check_same(before, Snapshot(b));

  DrafterSpec deeper = small_spec();
  deeper.num_hidden_layers = 3;
  Trained c(deeper, 7, 0);
  CHECK_THROWS_WITH_AS(load_checkpoint(step1, c.params, c.opt),
                       doctest::Contains("has no tensor 'layers.2.input_layernorm.weight'"), Error);

  DrafterSpec shallower = small_spec();
  shallower.num_hidden_layers = 1;
  Trained d(shallower, 7, 0);
  const std::string e2 = error_of([&] { load_checkpoint(step1, d.params, d.opt); });
  CHECK(e2.find("tensor 'layers.1.") != std::string::npos);
  CHECK(e2.find("is not a parameter of this model") != std::string::npos);

  // save refuses a step that disagrees with the optimizer, and a spec that is not the store's.
  CHECK_THROWS_WITH_AS(save_checkpoint(dir.path, 5, a.params, a.opt, {}),
                       doctest::Contains("step 5 was given but the optimizer has done 1 steps"), Error);
  CHECK_THROWS_WITH_AS(save_checkpoint(dir.path, 1, a.params, a.opt, {}, &wider),
                       doctest::Contains("does not describe this parameter store"), Error);
}

TEST_CASE("saving over an existing step replaces it completely; prune keeps the newest complete ones") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 1, 1);
  save_checkpoint(dir.path, 1, a.params, a.opt, {{"version", 1}});
  // New values for the same step (as a resumed run re-saving it).
  for (const ParamSpec& p : a.params.specs()) {
    std::vector<float> v = random_floats(size_t(p.shape.numel()), 999, 2.0f);
    a.params.master(p.name).copy_from_host(v.data(), v.size() * 4);
  }
  save_checkpoint(dir.path, 1, a.params, a.opt, {{"version", 2}});
  const fs::path ck = dir / "checkpoints";
  CHECK(listing(ck) == std::vector<std::string>{"step-1"});  // no staging or old directory left
  REQUIRE(latest_complete_checkpoint(dir.path) == ck / "step-1");
  Trained b(spec, 5, 0);
  CHECK(load_checkpoint(ck / "step-1", b.params, b.opt) == json{{"version", 2}});
  check_same(Snapshot(a), Snapshot(b));

  // publish_directory on its own: the target always holds one whole version.
  fs::create_directories(dir / "x" / "new");
  fs::create_directories(dir / "x" / "target");
  write_raw(dir / "x" / "new" / "f", "new");
  write_raw(dir / "x" / "target" / "f", "old");
  publish_directory(dir / "x" / "new", dir / "x" / "target");
  CHECK(read_raw(dir / "x" / "target" / "f") == "new");
  CHECK(listing(dir / "x") == std::vector<std::string>{"target"});

  for (int64_t s = 2; s <= 5; ++s) {
    a.step();
    save_checkpoint(dir.path, s, a.params, a.opt, {});
  }
  fs::create_directories(ck / "step-0");                  // no marker: left alone
  fs::create_directories(ck / ".tmp-step-6-1");           // another process's leftover: removed
  prune_checkpoints(dir.path, 2);
  CHECK(listing(ck) == std::vector<std::string>{"step-0", "step-4", "step-5"});

  // A damaged newest one does not count towards `keep`.
  fs::resize_file(ck / "step-5" / "params.safetensors", 10);
  prune_checkpoints(dir.path, 1);
  CHECK(listing(ck) == std::vector<std::string>{"step-0", "step-4", "step-5"});
  CHECK_THROWS_WITH_AS(prune_checkpoints(dir.path, 0), doctest::Contains("keep at least 1"), Error);
}

TEST_CASE("only canonical step-N names are checkpoints: a copy named step-05 is neither resumed nor pruned") {
  CpuRuntime rt;
  TempDir dir;
  const DrafterSpec spec = small_spec();
  Trained a(spec, 1, 3);
  save_checkpoint(dir.path, 3, a.params, a.opt, {});
  a.step();
  a.step();
  save_checkpoint(dir.path, 5, a.params, a.opt, {});
  const fs::path ck = dir / "checkpoints";
  fs::copy(ck / "step-5", ck / "step-05", fs::copy_options::recursive);  // a complete checkpoint's files
  CHECK(latest_complete_checkpoint(dir.path) == ck / "step-5");
  prune_checkpoints(dir.path, 1);  // keeps step-5, removes step-3, leaves the foreign name alone
  CHECK(listing(ck) == std::vector<std::string>{"step-05", "step-5"});
}

TEST_CASE("a failed save throws naming the path and leaves earlier checkpoints intact") {
  CpuRuntime rt;
  TempDir dir;
  Trained a(small_spec(), 1, 1);
  save_checkpoint(dir.path, 1, a.params, a.opt, {{"ok", true}});
  const fs::path ck = dir / "checkpoints";
  a.step();

  // Fails half-way, after the tensors were staged: the state cannot be serialized.
  const json bad = {{"name", std::string("\xff\xfe")}};
  const std::string e = error_of([&] { save_checkpoint(dir.path, 2, a.params, a.opt, bad); });
  CHECK(e.find("save_checkpoint '" + (ck / "step-2").string() + "' failed") != std::string::npos);
  CHECK(e.find("state.json") != std::string::npos);
  CHECK(e.find("earlier checkpoints are untouched") != std::string::npos);
  CHECK(listing(ck) == std::vector<std::string>{"step-1"});
  std::vector<std::string> w;
  CHECK(latest_complete_checkpoint(dir.path, &w) == ck / "step-1");
  CHECK(w.empty());

  // step-N is in the way as a file.
  write_raw(ck / "step-2", "x");
  const std::string in_the_way = "'" + (ck / "step-2").string() + "' exists and is not a directory";
  CHECK_THROWS_WITH_AS(save_checkpoint(dir.path, 2, a.params, a.opt, {}), doctest::Contains(in_the_way.c_str()), Error);
  fs::remove(ck / "step-2");

  // The checkpoints directory cannot be created: a file has its name.
  TempDir other;
  write_raw(other / "checkpoints", "x");
  const std::string cannot = "cannot create the directory '" + (other / "checkpoints").string() + "'";
  CHECK_THROWS_WITH_AS(save_checkpoint(other.path, 2, a.params, a.opt, {}), doctest::Contains(cannot.c_str()), Error);

  // A read-only checkpoints directory (root ignores permissions, so only as another user).
  if (::geteuid() != 0) {
    fs::permissions(ck, fs::perms::owner_read | fs::perms::owner_exec);
    CHECK_THROWS_WITH_AS(save_checkpoint(dir.path, 2, a.params, a.opt, {}),
                         doctest::Contains("cannot create the staging directory"), Error);
    fs::permissions(ck, fs::perms::owner_all);
  } else {
    MESSAGE("running as root: the read-only directory case is skipped");
  }
  CHECK(latest_complete_checkpoint(dir.path, &w) == ck / "step-1");
  Trained b(small_spec(), 3, 0);
  CHECK(load_checkpoint(ck / "step-1", b.params, b.opt) == json{{"ok", true}});
}

TEST_CASE("every marker problem is named in the warning; load refuses inconsistent contents") {
  CpuRuntime rt;
  TempDir dir;
  Trained a(small_spec(), 1, 1);
  save_checkpoint(dir.path, 1, a.params, a.opt, {{"k", 1}});
  const fs::path ck = dir / "checkpoints", good = ck / "step-1";
  struct Case {
    std::function<void(json&)> edit;
    std::string message;
  };
  const std::vector<Case> cases = {
      {[](json& m) { m["format"] = "other"; }, "COMPLETE.json is not a dflash checkpoint marker"},
      {[](json& m) { m.erase("version"); }, "COMPLETE.json has no integer \"version\""},
      {[](json& m) { m["version"] = 2; }, "COMPLETE.json has format version 2; this build reads version 1"},
      {[](json& m) { m.erase("step"); }, "COMPLETE.json has no integer \"step\""},
      {[](json& m) { m.erase("files"); }, "COMPLETE.json has no \"files\" list"},
      {[](json& m) { m["files"][0].erase("crc32"); }, "COMPLETE.json has a malformed file entry"},
      {[](json& m) { m["files"][0]["name"] = "../step-1/params.safetensors"; }, "which is not a plain file name"},
      {[](json& m) { m["files"].erase(2); }, "COMPLETE.json does not list state.json"},
  };
  for (const Case& c : cases) {
    fs::remove_all(ck / "step-2");
    fs::copy(good, ck / "step-2");
    reseal(ck / "step-2", [&](json& m) {
      m["step"] = 2;
      c.edit(m);
    });
    INFO(c.message);
    REQUIRE(checkpoint_problem(ck / "step-2"));
    CHECK(checkpoint_problem(ck / "step-2")->find(c.message) != std::string::npos);
    std::vector<std::string> w;
    CHECK(latest_complete_checkpoint(dir.path, &w) == good);
    REQUIRE(w.size() == 1);
    CHECK(w[0].find(c.message) != std::string::npos);
  }
  fs::remove_all(ck / "step-2");
  fs::copy(good, ck / "step-2");
  reseal(ck / "step-2", [](json& m) { m["step"] = 2; });
  fs::remove(ck / "step-2" / "state.json");
  fs::create_directory(ck / "step-2" / "state.json");
  CHECK(checkpoint_problem(ck / "step-2")->find("state.json is not a regular file") != std::string::npos);
  CHECK(checkpoint_problem(ck / "nowhere") == std::string("it is not a directory"));

  // Sealed (consistent marker) but wrong contents: load refuses, naming the file.
  Trained b(small_spec(), 9, 0);
  const Snapshot before(b);
  auto resealed_copy = [&](const std::string& file, const std::string& bytes) {
    const fs::path copy = dir / "copy";  // not named step-N: its name is not checked against the marker
    fs::remove_all(copy);
    fs::copy(good, copy);
    write_raw(copy / file, bytes);
    reseal(copy);
    return copy;
  };
  CHECK_THROWS_WITH_AS(load_checkpoint(resealed_copy("state.json", "{bad"), b.params, b.opt),
                       doctest::Contains("state.json' is not valid JSON"), Error);
  {
    std::vector<SafeTensorsEntry> entries;
    std::vector<std::vector<float>> data;
    const SafeTensors values(good / "params.safetensors");
    for (const std::string& n : values.names()) data.push_back(values.read_floats(n));
    std::vector<std::vector<uint16_t>> halves;
    for (size_t i = 0; i < data.size(); ++i) {
      halves.emplace_back(data[i].size());
      for (size_t k = 0; k < data[i].size(); ++k) halves[i][k] = f32_to_bf16(data[i][k]);
      entries.push_back({values.names()[i], "BF16", values.info(values.names()[i]).shape, halves[i].data()});
    }
    write_safetensors(dir / "bf16.safetensors", entries);
  }
  CHECK_THROWS_WITH_AS(load_checkpoint(resealed_copy("params.safetensors", read_raw(dir / "bf16.safetensors")),
                                       b.params, b.opt),
                       doctest::Contains("tensor 'fc.weight' is BF16; checkpoints hold F32"), Error);
  {
    const SafeTensors moments(good / "optimizer.safetensors");
    std::vector<std::vector<float>> data;
    std::vector<SafeTensorsEntry> entries;
    for (const std::string& n : moments.names())
      if (n != "step") data.push_back(moments.read_floats(n));
    size_t i = 0;
    for (const std::string& n : moments.names())
      if (n != "step") entries.push_back({n, "F32", moments.info(n).shape, data[i++].data()});
    const int32_t five = 5;
    entries.push_back({"step", "I32", {1}, &five});
    write_safetensors(dir / "step5.safetensors", entries);
    entries.pop_back();
    write_safetensors(dir / "nostep.safetensors", entries);
  }
  CHECK_THROWS_WITH_AS(load_checkpoint(resealed_copy("optimizer.safetensors", read_raw(dir / "step5.safetensors")),
                                       b.params, b.opt),
                       doctest::Contains("holds step 5 but COMPLETE.json records 1"), Error);
  CHECK_THROWS_WITH_AS(load_checkpoint(resealed_copy("optimizer.safetensors", read_raw(dir / "nostep.safetensors")),
                                       b.params, b.opt),
                       doctest::Contains("has no I32 tensor 'step' of one element"), Error);
  check_same(before, Snapshot(b));

  // An optimizer over another store, and a negative step.
  Trained c(small_spec(), 9, 0);
  DrafterSpec wider = small_spec();
  wider.intermediate_size = 24;
  Trained d(wider, 9, 0);
  CHECK_THROWS_WITH_AS(load_checkpoint(good, c.params, d.opt), doctest::Contains("the optimizer's moments hold"),
                       Error);
  CHECK_THROWS_WITH_AS(save_checkpoint(dir.path, -1, a.params, a.opt, {}), doctest::Contains("step -1 is negative"),
                       Error);
}

TEST_CASE("directory commit: a file in the target's place is refused; fsync names a missing directory") {
  TempDir dir;
  fs::create_directories(dir / "staged");
  write_raw(dir / "target", "x");
  CHECK_THROWS_WITH_AS(publish_directory(dir / "staged", dir / "target"),
                       doctest::Contains("exists and is not a directory"), Error);
  CHECK(read_raw(dir / "target") == "x");
  CHECK_THROWS_WITH_AS(fsync_directory(dir / "missing"), doctest::Contains("fsync of directory '"), Error);
}

TEST_CASE("checkpoint marker: a file grown after the save is named even when checksums are skipped") {
  CpuRuntime rt;
  TempDir dir("state-marker");
  Trained a(small_spec(), 1, 1);
  save_checkpoint(dir.path, 1, a.params, a.opt, {{"k", 1}});
  const fs::path ck = dir.path / "checkpoints" / "step-1";
  const std::string state = read_raw(ck / "state.json");
  CHECK_FALSE(checkpoint_problem(ck, false));
  write_raw(ck / "state.json", state + " ");
  const std::optional<std::string> problem = checkpoint_problem(ck, false);
  REQUIRE(problem);
  CHECK(*problem == "state.json has " + std::to_string(state.size() + 1) + " bytes but COMPLETE.json records " +
                        std::to_string(state.size()) + " (the file was truncated or rewritten after the save)");
}

TEST_CASE("checkpoint load: a v moment of another shape is refused by name and shape, and nothing is loaded") {
  CpuRuntime rt;
  TempDir dir("state-load");
  Trained a(small_spec(), 1, 1);
  save_checkpoint(dir.path, 1, a.params, a.opt, {{"k", 1}});
  const fs::path ck = dir.path / "checkpoints" / "step-1";
  int64_t numel = 0;
  {
    const SafeTensors moments(ck / "optimizer.safetensors");
    std::vector<std::vector<float>> data;
    std::vector<std::vector<int64_t>> shapes;
    for (const std::string& n : moments.names()) {
      if (n == "step") continue;
      data.push_back(moments.read_floats(n));
      shapes.push_back(moments.info(n).shape);
      if (n == "v.fc.weight") {
        REQUIRE(shapes.back().size() == 2);
        numel = int64_t(data.back().size());
        shapes.back() = {numel};  // the same values, flattened
      }
    }
    REQUIRE(numel > 0);
    std::vector<SafeTensorsEntry> entries;
    size_t i = 0;
    for (const std::string& n : moments.names())
      if (n != "step") entries.push_back({n, "F32", shapes[i], data[i].data()}), ++i;
    const std::vector<int32_t> step = moments.read_ints("step");
    entries.push_back({"step", "I32", {1}, step.data()});
    write_safetensors(dir / "flat-v.safetensors", entries);
  }
  write_raw(ck / "optimizer.safetensors", read_raw(dir / "flat-v.safetensors"));
  reseal(ck);
  Trained b(small_spec(), 9, 0);
  const Snapshot before(b);
  CHECK_ERROR(load_checkpoint(ck, b.params, b.opt),
              "optimizer.safetensors': tensor 'v.fc.weight' has shape [" + std::to_string(numel) +
                  "] but the model's parameter is");
  check_same(before, Snapshot(b));
}

}  // TEST_SUITE

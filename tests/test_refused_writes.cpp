// Refusals that change nothing on disk: a refused resume leaves every file of the dump folder
// (startup.json included) byte for byte; an export onto a non-empty --out is refused unless
// --overwrite, which replaces a previous export; a safetensors header padded with anything but
// spaces is refused naming the file.
#include <cstring>
#include <fstream>
#include <map>

#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "tests/test_util.h"
#include "tests/trainer_fixture.h"
#include "train/commands.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

namespace {
// Every file under dir: its path relative to dir and its bytes.
std::map<std::string, std::string> snapshot(const fs::path& dir) {
  std::map<std::string, std::string> out;
  for (const auto& e : fs::recursive_directory_iterator(dir))
    if (e.is_regular_file()) out[fs::relative(e.path(), dir).string()] = read_file_text(e.path());
  return out;
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

// A safetensors file of one F32 tensor [1] whose header is `json` followed by `padding`.
void write_padded(const fs::path& file, const std::string& json, const std::string& padding) {
  const std::string header = json + padding;
  const uint64_t n = header.size();
  std::string bytes(reinterpret_cast<const char*>(&n), 8);
  bytes += header;
  const float one = 1.0f;
  bytes.append(reinterpret_cast<const char*>(&one), 4);
  std::ofstream(file, std::ios::binary) << bytes;
}
}  // namespace

TEST_SUITE("refused-writes") {
  TEST_CASE("a resume refused for a changed bucket list leaves every file, startup.json included, as it was") {
    Config cfg = small_job("refused-resume", {}, 2);
    run_training(cfg);
    const fs::path dump = cfg.job.dump_folder;
    REQUIRE(fs::exists(dump / "startup.json"));
    const std::map<std::string, std::string> before = snapshot(dump);
    Config changed = cfg;
    changed.buckets[1].batch = 1;
    const std::string e = error_of([&] { run_training(changed); });
    CHECK(e.find("the saved data position was made for buckets") != std::string::npos);
    CHECK(e.find("fix: resume with the data, buckets and data.shuffle_seed of the saved run") != std::string::npos);
    CHECK(snapshot(dump) == before);
  }

  TEST_CASE("export onto an export is refused without --overwrite and replaced with it; other files are never replaced") {
    Config cfg = small_job("refused-export", {}, 2);
    const TrainResult r = run_training(cfg);
    const fs::path out = trainer_root() / "refused-export-out";
    run_export(r.last_checkpoint, out, "bf16");
    const std::map<std::string, std::string> first = snapshot(out);
    const std::string e = error_of([&] { run_export(r.last_checkpoint, out, "f32"); });
    CHECK(e.find("export: --out " + out.string() + " is not empty; fix: pass --overwrite to replace a previous export "
                 "there, or choose another --out") != std::string::npos);
    CHECK(snapshot(out) == first);
    run_export(r.last_checkpoint, out, "f32", /*overwrite=*/true);
    CHECK(nlohmann::json::parse(read_file_text(out / "config.json"))["torch_dtype"] == "float32");
    // An empty folder takes an export without --overwrite; a folder of other files is refused even with it.
    const fs::path empty = trainer_root() / "refused-export-empty";
    fs::create_directories(empty);
    run_export(r.last_checkpoint, empty, "bf16");
    CHECK(fs::exists(empty / "model.safetensors"));
    const fs::path notes = trainer_root() / "refused-export-notes";
    fs::create_directories(notes);
    std::ofstream(notes / "notes.txt") << "mine";
    CHECK(error_of([&] { run_export(r.last_checkpoint, notes, "bf16"); }).find("is not empty") != std::string::npos);
    const std::string o = error_of([&] { run_export(r.last_checkpoint, notes, "bf16", true); });
    CHECK(o.find("refusing to overwrite '" + notes.string() + "'") != std::string::npos);
    CHECK(read_file_text(notes / "notes.txt") == "mine");
  }

  TEST_CASE("a safetensors header padded with NUL bytes, or followed by other whitespace, is refused naming the file") {
    TempDir tmp("header-padding");
    const std::string json = R"({"w":{"dtype":"F32","shape":[1],"data_offsets":[0,4]}})";
    const fs::path good = tmp / "spaces.safetensors";
    write_padded(good, json, "   ");
    CHECK(SafeTensors(good).read_floats("w") == std::vector<float>{1.0f});
    const fs::path nul = tmp / "nul.safetensors";
    write_padded(nul, json, std::string(3, '\0'));
    const std::string e = error_of([&] { SafeTensors s(nul); });
    CHECK(e.find("safetensors '" + nul.string() + "': the header holds a NUL byte at offset " +
                 std::to_string(json.size()) + ": the format pads the header with spaces (0x20) only") !=
          std::string::npos);
    CHECK(e.find("fix: ") != std::string::npos);
    const fs::path nul_inside = tmp / "nul-inside.safetensors";
    write_padded(nul_inside, json, std::string(" \0 }", 4));
    CHECK(error_of([&] { SafeTensors s(nul_inside); }).find("holds a NUL byte at offset " + std::to_string(json.size() + 1)) !=
          std::string::npos);
    const fs::path newline = tmp / "newline.safetensors";
    write_padded(newline, json, "\n  ");
    const std::string n = error_of([&] { SafeTensors s(newline); });
    CHECK(n.find("safetensors '" + newline.string() + "': the header's JSON object is followed by byte 10 before the "
                 "data: the format pads the header with spaces (0x20) only") != std::string::npos);
  }
}

// The shard formats' shared pieces: names, the output directory's life cycle, and the index and header checks
// (declared in data/shard_files.h).
#include "data/shard_files.h"

#include <cstdio>

#include "runtime/error.h"

namespace dflash::shard_files {

std::string shard_name(const char* stem, size_t k) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%s-%05zu.bin", stem, k);
  return buf;
}

std::string magic_str(const uint8_t* p) {
  std::string s;
  char buf[8];
  for (int i = 0; i < 8; ++i) {
    if (p[i] >= 0x20 && p[i] < 0x7f) {
      s += char(p[i]);
    } else {
      std::snprintf(buf, sizeof buf, "\\x%02x", p[i]);
      s += buf;
    }
  }
  return s;
}

uint64_t mul_add(uint64_t a, uint64_t b, uint64_t c) {
  uint64_t r;
  if (__builtin_mul_overflow(a, b, &r) || __builtin_add_overflow(r, c, &r)) return UINT64_MAX;
  return r;
}

void remove_stale(const fs::path& dir, const std::string& stem, const std::set<std::string>& keep) {
  std::vector<fs::path> stale;
  for (const auto& e : fs::directory_iterator(dir)) {
    std::string name = e.path().filename().string();
    if (name.starts_with(stem + "-") && name.ends_with(".bin") && !keep.count(name)) stale.push_back(e.path());
  }
  for (const fs::path& p : stale) fs::remove(p);
}

void start_output_dir(const fs::path& dir, const std::string& what) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  DF_CHECK(!ec && fs::is_directory(dir), what << ": cannot create the directory '" << dir.string() << "': "
                                              << (ec ? ec.message() : "a file is in the way")
                                              << "; fix: check the path and its permissions");
  fs::remove(dir / "index.json", ec);
}

json read_index(const fs::path& dir, const std::string& what, const char* format, uint32_t version, const char* fix) {
  const fs::path path = dir / "index.json";
  DF_CHECK(fs::is_directory(dir), what << " '" << dir.string() << "' is not a directory; fix: point at the directory "
                                       << "written by `dflash-train`");
  DF_CHECK(fs::exists(path), what << " '" << dir.string() << "': there is no index.json (an interrupted run leaves "
                                  << "none); fix: " << fix);
  json j;
  try {
    j = json::parse(read_file_text(path));
    DF_CHECK(j.value("format", "") == format, path.string() << ": format is '" << j.value("format", "")
                                                            << "', expected '" << format << "'; fix: " << fix);
    DF_CHECK(j.at("version").get<uint32_t>() == version,
             path.string() << ": version is " << j.at("version").dump() << ", expected " << version
                           << " (the version this build reads); fix: " << fix << " with this build");
    (void)j.at("sequences").get<int64_t>();
    for (const json& s : j.at("shards")) {
      (void)s.at("file").get<std::string>();
      (void)s.at("first_sequence").get<int64_t>();
      (void)s.at("sequences").get<int64_t>();
    }
  } catch (const json::exception& e) {
    DF_FAIL(path.string() << ": malformed (" << e.what() << "); fix: " << fix);
  }
  return j;
}

MappedFile open_shard(const fs::path& dir, const json& entry, int64_t expect_first, const char* magic,
                      uint32_t version, const char* fix, std::string& f) {
  const fs::path path = dir / entry.at("file").get<std::string>();
  f = path.string();
  DF_CHECK(fs::exists(path), dir.string() << "/index.json lists '" << entry.at("file").get<std::string>()
                                          << "', which does not exist; fix: " << fix);
  DF_CHECK(entry.at("first_sequence").get<int64_t>() == expect_first,
           dir.string() << "/index.json: first_sequence of '" << entry.at("file").get<std::string>() << "' is "
                        << entry.at("first_sequence").get<int64_t>() << ", expected " << expect_first
                        << " (the shards before it hold that many); fix: " << fix);
  MappedFile file(path);
  const uint8_t* p = file.data();
  DF_CHECK(file.size() >= kHeaderBytes, f << ": the file is " << file.size() << " bytes, shorter than the "
                                          << kHeaderBytes << "-byte header; it is truncated; fix: " << fix);
  DF_CHECK(std::memcmp(p, magic, 8) == 0, f << ": magic is '" << magic_str(p) << "', expected '"
                                            << magic_str(reinterpret_cast<const uint8_t*>(magic))
                                            << "'; it is not this kind of shard; fix: " << fix);
  DF_CHECK(load<uint32_t>(p, 8) == version, f << ": version is " << load<uint32_t>(p, 8) << ", expected " << version
                                              << " (the version this build reads); fix: " << fix << " with this build");
  return file;
}

}  // namespace dflash::shard_files

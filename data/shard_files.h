// The shard formats' shared pieces (data/shards.cpp, data/hidden_shards.cpp): little-endian fields, shard names,
// the output directory's life cycle, and the index and header checks common to token and hidden-state shards.
#pragma once

#include <cstdint>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <vector>

#include "runtime/fileio.h"

namespace dflash::shard_files {

namespace fs = std::filesystem;
using json = nlohmann::json;

inline constexpr char kTokenMagic[8] = {'D', 'F', 'L', 'T', 'O', 'K', '\0', '\1'};
inline constexpr char kHiddenMagic[8] = {'D', 'F', 'L', 'H', 'I', 'D', '\0', '\1'};
inline constexpr uint64_t kHeaderBytes = 64;
inline constexpr const char* kPrepareFix = "re-run `dflash-train prepare`";
inline constexpr const char* kHiddenFix = "re-run `dflash-train hidden`";

template <class T>
T load(const uint8_t* p, uint64_t at) {
  T v;
  std::memcpy(&v, p + at, sizeof(T));
  return v;
}

template <class T>
void store(std::vector<uint8_t>& out, uint64_t at, T v) {
  std::memcpy(out.data() + at, &v, sizeof(T));
}

// "stem-0000k.bin"
std::string shard_name(const char* stem, size_t k);
// The 8 magic bytes as text, unprintable bytes as \xNN.
std::string magic_str(const uint8_t* p);
// a * b + c, or UINT64_MAX when it overflows (no real file is that large).
uint64_t mul_add(uint64_t a, uint64_t b, uint64_t c);
// Removes stem-*.bin files of an earlier run that the new index does not list.
void remove_stale(const fs::path& dir, const std::string& stem, const std::set<std::string>& keep);
// Creates the output directory and removes its index, so that until the new index is written
// the directory refuses to open instead of mixing old and new shards.
void start_output_dir(const fs::path& dir, const std::string& what);
// The shard directory's index.json, checked for its format name and version.
json read_index(const fs::path& dir, const std::string& what, const char* format, uint32_t version, const char* fix);
// Opens a shard the index lists; checks the size, magic and version common to both formats (f: its path, for
// the caller's messages).
MappedFile open_shard(const fs::path& dir, const json& entry, int64_t expect_first, const char* magic,
                      uint32_t version, const char* fix, std::string& f);

}  // namespace dflash::shard_files

// A header field that must equal what the index or the writer implies; needs `f` (the file) and `fix` in scope.
#define DF_FIELD(found, expected, what)                                                                      \
  DF_CHECK((found) == (expected), f << ": " << what << " is " << (found) << ", expected " << (expected) << "; fix: " \
                                    << fix)

// Fingerprints of the data a run trains and evaluates on (data.train, data.eval): a 64-bit hash
// (XXH64) of each file's bytes, for a JSONL file the file, for a token-shard directory index.json
// and every tokens-*.bin. Every checkpoint records them; a resume on other bytes is refused by key
// unless data.allow_changed. Hashes are cached by (path, size, mtime) in
// <dump_folder>/data-fingerprints.json, so a resume on unchanged files reads none of them.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

#include "train/config.h"

namespace dflash {

inline constexpr const char* kDataFingerprintKey = "data_fingerprint";  // in a checkpoint's state.json
inline constexpr const char* kDataFingerprintCache = "data-fingerprints.json";

// XXH64 (seed 0), streamed: equal to the one-shot hash of all bytes given, however split.
class Hash64 {
 public:
  void update(const void* data, size_t bytes);
  uint64_t value() const;

 private:
  uint64_t v_[4] = {0x60ea27eeadc0b5d6ull, 0xc2b2ae3d27d4eb4full, 0ull, 0x61c8864e7a143579ull};
  unsigned char buffer_[32] = {};
  size_t buffered_ = 0;
  uint64_t total_ = 0;
};

// Sixteen lowercase hex digits.
std::string hash64_hex(uint64_t h);

// The fingerprint of a data path (a file or a token-shard directory):
// {"path", "bytes" (all files), "files": {name: {"bytes", "xxh64"}}}. A file whose path, size and
// mtime are in `cache` is not read; the others are, once, and entered in `cache`. bytes_read (when
// given) grows by what was read. Throws Error naming the file on a read error.
nlohmann::json fingerprint_data(const std::filesystem::path& data, nlohmann::json& cache,
                                uint64_t* bytes_read = nullptr);

// data.train's and data.eval's fingerprints ({"data.train": ..., "data.eval": ...}), through the
// cache file in the dump folder (rewritten atomically when it gained entries). log: one line
// with the bytes read and the time, when any were read.
nlohmann::json job_data_fingerprints(const Config& cfg, const std::function<void(const std::string&)>& log,
                                     uint64_t* bytes_read = nullptr);

// What differs between a saved fingerprint and the current one ("" when nothing): the size, or
// the content at the same size, with the files of a directory that differ, were added or removed.
std::string data_change(const nlohmann::json& saved, const nlohmann::json& now);

// A resume from `checkpoint` whose state.json is `state`: "" when its data fingerprints match
// `now` (or it has none and !allow_changed); "changed" when data.train's differs (or it has none)
// and cfg.data.allow_changed (the saved data position is then dropped); a difference with
// !allow_changed throws Error naming the key, what changed and the choices.
std::string check_data_unchanged(const Config& cfg, const nlohmann::json& state, const nlohmann::json& now,
                                 const std::filesystem::path& checkpoint);

}  // namespace dflash

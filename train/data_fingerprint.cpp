// Data fingerprints (train/data_fingerprint.h): XXH64 streamed over each data file, cached by
// (path, size, mtime) in the dump folder, compared on resume.
#include "train/data_fingerprint.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

#include "runtime/error.h"
#include "runtime/fileio.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr uint64_t P1 = 0x9E3779B185EBCA87ull, P2 = 0xC2B2AE3D27D4EB4Full, P3 = 0x165667B19E3779F9ull,
                   P4 = 0x85EBCA77C2B2AE63ull, P5 = 0x27D4EB2F165667C5ull;

inline uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }
inline uint64_t read64(const unsigned char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;  // little-endian hosts only (x86-64, aarch64)
}
inline uint32_t read32(const unsigned char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t round64(uint64_t acc, uint64_t input) { return rotl(acc + input * P2, 31) * P1; }
inline uint64_t merge(uint64_t acc, uint64_t v) { return (acc ^ round64(0, v)) * P1 + P4; }
}  // namespace

void Hash64::update(const void* data, size_t bytes) {
  const unsigned char* p = static_cast<const unsigned char*>(data);
  total_ += bytes;
  if (buffered_ + bytes < 32) {
    std::memcpy(buffer_ + buffered_, p, bytes);
    buffered_ += bytes;
    return;
  }
  if (buffered_) {
    const size_t fill = 32 - buffered_;
    std::memcpy(buffer_ + buffered_, p, fill);
    for (int i = 0; i < 4; ++i) v_[i] = round64(v_[i], read64(buffer_ + 8 * i));
    p += fill, bytes -= fill, buffered_ = 0;
  }
  uint64_t v0 = v_[0], v1 = v_[1], v2 = v_[2], v3 = v_[3];
  for (; bytes >= 32; p += 32, bytes -= 32) {
    v0 = round64(v0, read64(p));
    v1 = round64(v1, read64(p + 8));
    v2 = round64(v2, read64(p + 16));
    v3 = round64(v3, read64(p + 24));
  }
  v_[0] = v0, v_[1] = v1, v_[2] = v2, v_[3] = v3;
  std::memcpy(buffer_, p, bytes);
  buffered_ = bytes;
}

uint64_t Hash64::value() const {
  uint64_t h;
  if (total_ >= 32) {
    h = rotl(v_[0], 1) + rotl(v_[1], 7) + rotl(v_[2], 12) + rotl(v_[3], 18);
    for (uint64_t v : v_) h = merge(h, v);
  } else {
    h = P5;
  }
  h += total_;
  const unsigned char* p = buffer_;
  size_t n = buffered_;
  for (; n >= 8; p += 8, n -= 8) h = rotl(h ^ round64(0, read64(p)), 27) * P1 + P4;
  if (n >= 4) {
    h = rotl(h ^ (uint64_t(read32(p)) * P1), 23) * P2 + P3;
    p += 4, n -= 4;
  }
  for (; n > 0; ++p, --n) h = rotl(h ^ (uint64_t(*p) * P5), 11) * P1;
  h ^= h >> 33;
  h *= P2;
  h ^= h >> 29;
  h *= P3;
  h ^= h >> 32;
  return h;
}

std::string hash64_hex(uint64_t h) {
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return buf;
}

namespace {
// One file's {"bytes", "xxh64"}, from the cache when its size and mtime are the cached ones.
json file_fingerprint(const fs::path& file, json& cache, uint64_t* bytes_read) {
  const std::string key = fs::absolute(file).lexically_normal().string();
  struct stat st {};
  DF_CHECK(::stat(file.c_str(), &st) == 0, "cannot read " << file.string() << " (" << std::strerror(errno)
                                                          << ") to fingerprint it; fix: check the data path");
  const int64_t mtime = int64_t(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  json& files = cache["files"];
  if (files.contains(key) && files[key].value("bytes", int64_t(-1)) == int64_t(st.st_size) &&
      files[key].value("mtime_ns", int64_t(-1)) == mtime && files[key].contains("xxh64"))
    return {{"bytes", int64_t(st.st_size)}, {"xxh64", files[key]["xxh64"]}};
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  DF_CHECK(fd >= 0, "cannot open " << file.string() << " (" << std::strerror(errno) << ") to fingerprint it");
  Hash64 h;
  std::vector<char> buf(size_t(4) << 20);
  int64_t bytes = 0;
  for (;;) {
    const ssize_t n = ::read(fd, buf.data(), buf.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int e = errno;
      ::close(fd);
      DF_FAIL("cannot read " << file.string() << " (" << std::strerror(e) << ") to fingerprint it");
    }
    if (n == 0) break;
    h.update(buf.data(), size_t(n));
    bytes += n;
  }
  ::close(fd);
  if (bytes_read) *bytes_read += uint64_t(bytes);
  const std::string hex = hash64_hex(h.value());
  files[key] = {{"bytes", bytes}, {"mtime_ns", mtime}, {"xxh64", hex}};
  return {{"bytes", bytes}, {"xxh64", hex}};
}
}  // namespace

json fingerprint_data(const fs::path& data, json& cache, uint64_t* bytes_read) {
  if (!cache.is_object()) cache = json::object();
  if (!cache.contains("files") || !cache["files"].is_object()) cache["files"] = json::object();
  std::vector<std::string> names;
  if (fs::is_directory(data)) {
    for (const auto& e : fs::directory_iterator(data)) {
      const std::string n = e.path().filename().string();
      const bool shard = n.rfind("tokens-", 0) == 0 && n.size() > 4 && n.compare(n.size() - 4, 4, ".bin") == 0;
      if (e.is_regular_file() && (n == "index.json" || shard)) names.push_back(n);
    }
    std::sort(names.begin(), names.end());
  }
  json files = json::object();
  int64_t total = 0;
  if (names.empty()) {
    files[data.filename().string()] = file_fingerprint(data, cache, bytes_read);
  } else {
    for (const std::string& n : names) files[n] = file_fingerprint(data / n, cache, bytes_read);
  }
  for (const auto& [n, f] : files.items()) total += f["bytes"].get<int64_t>();
  return {{"path", data.string()}, {"bytes", total}, {"files", files}};
}

json job_data_fingerprints(const Config& cfg, const std::function<void(const std::string&)>& log,
                           uint64_t* bytes_read) {
  const fs::path cache_file = cfg.job.dump_folder / kDataFingerprintCache;
  json cache = json::object();
  if (fs::exists(cache_file)) {
    cache = json::parse(read_file_text(cache_file), nullptr, false);
    if (cache.is_discarded()) cache = json::object();  // a damaged cache only costs a re-read
  }
  const auto t0 = std::chrono::steady_clock::now();
  uint64_t read = 0;
  json out = json::object();
  if (!cfg.data.train.empty() && fs::exists(cfg.data.train))
    out["data.train"] = fingerprint_data(cfg.data.train, cache, &read);
  if (!cfg.data.eval.empty() && fs::exists(cfg.data.eval))
    out["data.eval"] = fingerprint_data(cfg.data.eval, cache, &read);
  if (read > 0) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char buf[160];
    std::snprintf(buf, sizeof buf, "data fingerprints: %.1f MB hashed in %.2f s (cached in ", double(read) / 1e6, s);
    if (log) log(buf + cache_file.string() + ")");
    write_file_atomic(cache_file, cache.dump(1) + "\n");
  }
  if (bytes_read) *bytes_read += read;
  return out;
}

std::string data_change(const json& saved, const json& now) {
  const int64_t before = saved.value("bytes", int64_t(-1)), after = now.value("bytes", int64_t(-1));
  std::string files;
  const json& a = saved.contains("files") ? saved["files"] : json::object();
  const json& b = now.contains("files") ? now["files"] : json::object();
  for (const auto& [n, f] : a.items()) {
    if (!b.contains(n)) files += (files.empty() ? "" : ", ") + n + " removed";
    else if (b[n] != f) files += (files.empty() ? "" : ", ") + n + " differs";
  }
  for (const auto& [n, f] : b.items())
    if (!a.contains(n)) files += (files.empty() ? "" : ", ") + n + " added";
  if (before != after)
    return "its size changed: " + std::to_string(before) + " bytes when the checkpoint was written, " +
           std::to_string(after) + " now" + (a.size() > 1 || b.size() > 1 ? " (" + files + ")" : "");
  if (files.empty()) return "";
  return "same size (" + std::to_string(after) + " bytes), other content" +
         (a.size() > 1 || b.size() > 1 ? " (" + files + ")" : "");
}

std::string check_data_unchanged(const Config& cfg, const json& state, const json& now, const fs::path& checkpoint) {
  if (!state.contains(kDataFingerprintKey)) return cfg.data.allow_changed ? "changed" : "";
  const json& saved = state[kDataFingerprintKey];
  bool changed = false;
  for (const char* key : {"data.train", "data.eval"}) {
    if (!saved.contains(key) || !now.contains(key)) continue;
    const std::string what = data_change(saved[key], now[key]);
    if (what.empty()) continue;
    changed = changed || std::string(key) == "data.train";  // the eval set holds no position
    DF_CHECK(cfg.data.allow_changed,
             cfg.source.string() << ": " << key << " = \"" << now[key].value("path", std::string()) << "\" changed since "
                                 << checkpoint.string() << " was written: " << what
                                 << "; the saved data position belongs to the old data; fix: resume with the original "
                                    "data, or set data.allow_changed = true to restart the data order at the beginning "
                                    "of the next epoch on purpose");
  }
  return changed ? "changed" : "";
}

}  // namespace dflash

// Small file helpers used across the project: whole-file reads, read-only memory maps, and atomic
// writes (temp file + fsync + rename) that never leave a half-written or damaged file behind.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace dflash {

// The whole file. Throws Error naming the path and the OS error when it is missing or unreadable.
std::vector<uint8_t> read_file_bytes(const std::filesystem::path& path);
std::string read_file_text(const std::filesystem::path& path);

// A read-only, private memory map of a whole file; data() is nullptr for an empty file.
// The mapping stays valid while the object lives even if the path is renamed over; truncating the
// file underneath it is undefined (SIGBUS), so only map files nobody else is rewriting in place.
class MappedFile {
 public:
  MappedFile() = default;
  explicit MappedFile(const std::filesystem::path& path);  // throws Error naming the path
  ~MappedFile();
  MappedFile(MappedFile&& other) noexcept;
  MappedFile& operator=(MappedFile&& other) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;

  const uint8_t* data() const { return data_; }
  size_t size() const { return size_; }
  const std::filesystem::path& path() const { return path_; }

 private:
  void release() noexcept;
  std::filesystem::path path_;
  const uint8_t* data_ = nullptr;
  size_t size_ = 0;
};

// Receives the bytes of a file being written, in order; each call is written through at once.
using ByteSink = std::function<void(const void* data, size_t bytes)>;

// Writes `path` atomically: the bytes go to `path.tmp.<pid>` in the same directory, which is
// fsynced and renamed over `path`, and then the directory is fsynced. On any failure (including
// an exception thrown by `writer`) the temp file is removed and an Error naming the path (and the
// OS error, when there is one) is thrown; an existing file at `path` is never touched until the
// rename. Two threads of one process must not write the same path at the same time.
void write_file_atomic(const std::filesystem::path& path, const std::function<void(const ByteSink&)>& writer);
void write_file_atomic(const std::filesystem::path& path, std::string_view bytes);
void write_file_atomic(const std::filesystem::path& path, const std::vector<uint8_t>& bytes);

}  // namespace dflash

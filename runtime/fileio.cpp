// File helpers: whole-file reads, read-only memory maps and atomic writes (POSIX).
#include "runtime/fileio.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {

std::string os_error(int err) { return std::strerror(err); }

// Opens a regular file for reading; names the path and the OS error when it cannot.
int open_for_reading(const fs::path& path, const char* what, struct stat& st) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DF_CHECK(fd >= 0, what << ": cannot open '" << path.string() << "': " << os_error(errno)
                         << "; fix: check the path and its permissions");
  int rc = ::fstat(fd, &st);
  int err = rc != 0 ? errno : 0;
  if (rc != 0 || !S_ISREG(st.st_mode)) {
    bool is_dir = S_ISDIR(st.st_mode);
    ::close(fd);
    DF_FAIL(what << ": cannot read '" << path.string() << "': "
                 << (is_dir ? "it is a directory" : err ? os_error(err) : "not a regular file")
                 << "; fix: pass the path of a file");
  }
  return fd;
}

template <class Bytes>
Bytes read_whole(const fs::path& path) {
  struct stat st {};
  int fd = open_for_reading(path, "read_file", st);
  Bytes out;
  out.resize(size_t(st.st_size));
  size_t got = 0;
  for (;;) {
    if (got == out.size()) out.resize(out.size() * 2 + 4096);  // the file grew since fstat
    ssize_t n = ::read(fd, out.data() + got, out.size() - got);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      DF_FAIL("read_file: reading '" << path.string() << "' failed: " << os_error(err));
    }
    if (n == 0) break;
    got += size_t(n);
  }
  ::close(fd);
  out.resize(got);
  return out;
}

// Thrown by the sink inside write_file_atomic; carries the failing step and errno.
struct OsFailure {
  std::string step;
  int err;
};

void write_all(int fd, const void* data, size_t bytes) {
  const char* p = static_cast<const char*>(data);
  while (bytes > 0) {
    ssize_t n = ::write(fd, p, bytes);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) throw OsFailure{"write", errno};
    p += n;
    bytes -= size_t(n);
  }
}

}  // namespace

std::vector<uint8_t> read_file_bytes(const fs::path& path) { return read_whole<std::vector<uint8_t>>(path); }

std::string read_file_text(const fs::path& path) { return read_whole<std::string>(path); }

MappedFile::MappedFile(const fs::path& path) : path_(path) {
  struct stat st {};
  int fd = open_for_reading(path, "MappedFile", st);
  size_ = size_t(st.st_size);
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    int err = errno;
    ::close(fd);
    DF_CHECK(p != MAP_FAILED, "MappedFile: cannot map '" << path.string() << "' (" << size_
                                                         << " bytes): " << os_error(err));
    data_ = static_cast<const uint8_t*>(p);
  } else {
    ::close(fd);
  }
}

void MappedFile::release() noexcept {
  if (data_) ::munmap(const_cast<uint8_t*>(data_), size_);
  data_ = nullptr;
  size_ = 0;
}

MappedFile::~MappedFile() { release(); }

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)), data_(other.data_), size_(other.size_) {
  other.data_ = nullptr;
  other.size_ = 0;
}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    release();
    path_ = std::move(other.path_);
    data_ = other.data_;
    size_ = other.size_;
    other.data_ = nullptr;
    other.size_ = 0;
  }
  return *this;
}

void write_file_atomic(const fs::path& path, const std::function<void(const ByteSink&)>& writer) {
  fs::path tmp = path;
  tmp += ".tmp." + std::to_string(::getpid());
  const std::string where = "write_file_atomic: cannot write '" + path.string() + "' (via '" + tmp.string() + "')";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  DF_CHECK(fd >= 0, where << ": create: " << os_error(errno)
                          << "; fix: check that the directory exists and is writable");
  auto discard = [&] {
    if (fd >= 0) ::close(fd);
    ::unlink(tmp.c_str());
  };
  try {
    bool sink_failed = false;
    ByteSink sink = [&](const void* data, size_t bytes) {
      try {
        write_all(fd, data, bytes);
      } catch (const OsFailure&) {
        sink_failed = true;
        throw;
      }
    };
    writer(sink);
    if (sink_failed) throw OsFailure{"write (the writer ignored an earlier failure)", EIO};
    if (::fsync(fd) != 0) throw OsFailure{"fsync", errno};
    int rc = ::close(fd);
    fd = -1;
    if (rc != 0) throw OsFailure{"close", errno};
    if (::rename(tmp.c_str(), path.c_str()) != 0) throw OsFailure{"rename", errno};
  } catch (const OsFailure& f) {
    discard();
    DF_FAIL(where << ": " << f.step << ": " << os_error(f.err) << "; '" << path.string()
                  << "' is unchanged; fix: check free space, permissions and that the path is not a directory");
  } catch (const Error& e) {
    discard();
    DF_FAIL("write_file_atomic: writing '" << path.string() << "' failed: " << e.what() << "; '"
                                           << path.string() << "' is unchanged");
  } catch (...) {
    discard();
    throw;
  }
  // The rename is durable only once the directory entry is on disk.
  fs::path dir = path.parent_path().empty() ? fs::path(".") : path.parent_path();
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int err = dfd < 0 ? errno : (::fsync(dfd) != 0 ? errno : 0);
  if (dfd >= 0) ::close(dfd);
  DF_CHECK(err == 0, "write_file_atomic: '" << path.string() << "' was written, but syncing its directory '"
                                            << dir.string() << "' failed: " << os_error(err)
                                            << "; the file may not survive a crash");
}

void write_file_atomic(const fs::path& path, std::string_view bytes) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

void write_file_atomic(const fs::path& path, const std::vector<uint8_t>& bytes) {
  write_file_atomic(path, [&](const ByteSink& sink) { sink(bytes.data(), bytes.size()); });
}

}  // namespace dflash

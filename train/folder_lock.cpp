// One writer per folder (train/folder_lock.h): flock on a lock file whose text names the holder.
#include "train/folder_lock.h"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <ctime>
#include <sstream>
#include <utility>

#include "dist/coordinator.h"
#include "runtime/error.h"
#include "train/job.h"

namespace dflash {

namespace fs = std::filesystem;

namespace {
// The lock file's text: "pid N\nhost H\nsince T\n" (T: UTC, ISO 8601).
std::string holder_text() {
  char host[256] = {};
  if (::gethostname(host, sizeof host - 1) != 0) std::strcpy(host, "?");
  char when[32] = "?";
  const std::time_t now = std::time(nullptr);
  std::tm utc = {};
  if (::gmtime_r(&now, &utc)) std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", &utc);
  return "pid " + std::to_string(::getpid()) + "\nhost " + host + "\nsince " + when + "\n";
}

// "pid N on host H since T" from the holder's text, read through fd.
std::string describe_holder(int fd, const fs::path& file) {
  char buf[512] = {};
  const ssize_t got = ::pread(fd, buf, sizeof buf - 1, 0);
  std::string pid, host, since;
  std::istringstream in(std::string(buf, got > 0 ? size_t(got) : 0));
  for (std::string line; std::getline(in, line);) {
    if (line.rfind("pid ", 0) == 0) pid = line.substr(4);
    else if (line.rfind("host ", 0) == 0) host = line.substr(5);
    else if (line.rfind("since ", 0) == 0) since = line.substr(6);
  }
  if (pid.empty()) return "another process (" + file.string() + " does not name it yet)";
  return "pid " + pid + " on host " + (host.empty() ? "?" : host) + " since " + (since.empty() ? "?" : since);
}
}  // namespace

FolderLock::FolderLock(FolderLock&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), file_(std::move(other.file_)) {}

FolderLock& FolderLock::operator=(FolderLock&& other) noexcept {
  if (this != &other) {
    FolderLock old(std::move(*this));
    fd_ = std::exchange(other.fd_, -1);
    file_ = std::move(other.file_);
  }
  return *this;
}

// The file goes before the lock: a process that opened it meanwhile finds, once it gets the lock,
// that the path no longer names its file, and starts again (acquire).
FolderLock::~FolderLock() {
  if (fd_ < 0) return;
  ::unlink(file_.c_str());
  ::close(fd_);
}

FolderLock FolderLock::acquire(const fs::path& file, const fs::path& folder, const std::string& fix) {
  std::error_code ec;
  if (file.has_parent_path()) fs::create_directories(file.parent_path(), ec);
  for (int attempt = 0; attempt < 100; ++attempt) {
    const int fd = ::open(file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
    DF_CHECK(fd >= 0, "cannot open the lock file " << file.string() << " of " << folder.string() << " ("
                                                   << std::strerror(errno) << "); fix: make " << folder.string()
                                                   << " a writable folder, or " << fix);
    if (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
      const int err = errno;
      const std::string holder = describe_holder(fd, file);
      ::close(fd);
      if (err == EWOULDBLOCK) DF_FAIL(folder.string() << " is in use by " << holder << "; wait for it, or " << fix);
      DF_FAIL(lock_unsupported_message(folder, err, fix));
    }
    // The lock guards the file the path names now; the previous holder may have removed it between
    // this open and the flock.
    struct stat mine = {}, named = {};
    if (::fstat(fd, &mine) == 0 && ::stat(file.c_str(), &named) == 0 && mine.st_dev == named.st_dev &&
        mine.st_ino == named.st_ino) {
      FolderLock lock;
      lock.fd_ = fd;
      lock.file_ = file;
      // The text only names the holder in a refusal: a failed write leaves the lock as good.
      const std::string text = holder_text();
      if (::ftruncate(fd, 0) == 0 && ::pwrite(fd, text.data(), text.size(), 0) == ssize_t(text.size())) ::fsync(fd);
      return lock;
    }
    ::close(fd);
  }
  DF_FAIL("cannot lock " << folder.string() << ": its lock file " << file.string()
                         << " was replaced 100 times while being locked; fix: wait for the other writers, or " << fix);
}

fs::path dump_folder_lock_file(const fs::path& folder) { return folder / ".lock"; }

fs::path export_lock_file(const fs::path& out) {
  const fs::path dir = out.has_filename() ? out : out.parent_path();
  return dir.parent_path() / ("." + dir.filename().string() + ".lock");
}

std::string lock_unsupported_message(const fs::path& folder, int err, const std::string& fix) {
  return "cannot lock " + folder.string() + " (flock: " + std::strerror(err) +
         "): its file system does not support locks, so two runs there could overwrite each other; fix: mount it "
         "with working locks (NFS: without the nolock option, with lockd or NFSv4; Lustre: the flock mount "
         "option), or " + fix + " on a local or lock-capable file system";
}

std::optional<FolderLock> lock_dump_folder(const fs::path& folder, Coordinator* coord) {
  const std::string fix = "choose another job.dump_folder";
  const bool root = !coord || coord->rank() == 0;
  std::optional<FolderLock> lock;
  std::string refusal;
  if (root) {
    try {
      ensure_writable_dir(folder, "job.dump_folder");  // its own message for a folder that cannot be made
      lock = FolderLock::acquire(dump_folder_lock_file(folder), folder, fix);
    } catch (const std::exception& e) {
      refusal = e.what();
    }
  }
  if (coord && coord->size() > 1) refusal = coord->broadcast(refusal);
  DF_CHECK(refusal.empty(), refusal);
  return lock;
}

}  // namespace dflash

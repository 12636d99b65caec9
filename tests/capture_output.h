// Captures what the process writes to stdout or stderr (a file descriptor redirected to a
// temporary file) while the object lives, for tests of log lines and warnings.
#pragma once
#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

namespace dflash::test {

class CaptureFd {
 public:
  explicit CaptureFd(int fd) : fd_(fd) {
    static std::atomic<int> counter{0};
    file_ = std::filesystem::temp_directory_path() /
            ("dflash-capture-" + std::to_string(::getpid()) + "-" + std::to_string(counter++));
    std::fflush(nullptr);
    saved_ = ::dup(fd_);
    int f = ::open(file_.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
    ::dup2(f, fd_);
    ::close(f);
  }
  ~CaptureFd() {
    restore();
    std::error_code ec;
    std::filesystem::remove(file_, ec);
  }
  // Everything written so far; stops capturing.
  std::string text() {
    restore();
    std::ifstream in(file_);
    return std::string(std::istreambuf_iterator<char>(in), {});
  }

 private:
  void restore() {
    if (saved_ < 0) return;
    std::fflush(nullptr);
    ::dup2(saved_, fd_);
    ::close(saved_);
    saved_ = -1;
  }
  int fd_, saved_ = -1;
  std::filesystem::path file_;
};

}  // namespace dflash::test

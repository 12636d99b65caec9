// The file helpers at their edges: a write that fails inside a writer which swallows the error,
// files whose size stat cannot tell (/proc), and the CRC-32 of a file longer than one read chunk.
#include <signal.h>
#include <sys/resource.h>

#include <random>

#include "tests/checkpoint_io_util.h"

using namespace dflash;
using namespace dflash::test;
using namespace dflash::test::ckpt;

namespace {

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// Writes beyond `bytes` of any file fail with EFBIG (SIGXFSZ ignored) while this lives. Nothing may
// print to a file while it does, so the checks come after it ends.
class FileSizeLimit {
 public:
  explicit FileSizeLimit(rlim_t bytes) {
    old_handler_ = ::signal(SIGXFSZ, SIG_IGN);
    ::getrlimit(RLIMIT_FSIZE, &old_);
    rlimit lim = old_;
    lim.rlim_cur = bytes;
    ok_ = ::setrlimit(RLIMIT_FSIZE, &lim) == 0;
  }
  ~FileSizeLimit() {
    ::setrlimit(RLIMIT_FSIZE, &old_);
    ::signal(SIGXFSZ, old_handler_);
  }
  bool ok() const { return ok_; }

 private:
  rlimit old_{};
  void (*old_handler_)(int) = nullptr;
  bool ok_ = false;
};

}  // namespace

TEST_SUITE("checkpoint-io") {
  TEST_CASE("write_file_atomic: a failed write that the writer swallows still fails, leaving the old file") {
    TempDir dir("fileio");
    const fs::path p = dir / "f.bin";
    write_raw(p, "old contents");
    const std::string big(8192, 'x');
    bool sink_threw = false, writer_returned = false;
    std::string msg;
    {
      FileSizeLimit limit(4096);
      REQUIRE(limit.ok());
      msg = error_of([&] {
        write_file_atomic(p, [&](const ByteSink& sink) {
          try {
            sink(big.data(), big.size());
          } catch (...) {
            sink_threw = true;  // a careless writer: it goes on as if the bytes were written
          }
          writer_returned = true;
        });
      });
    }
    CHECK(sink_threw);
    CHECK(writer_returned);
    INFO(msg);
    CHECK(contains(msg, "cannot write '" + p.string() + "'"));
    CHECK(contains(msg, "the writer ignored an earlier failure"));
    CHECK(contains(msg, "is unchanged"));
    CHECK(read_raw(p) == "old contents");
    CHECK(listing(dir.path) == std::vector<std::string>{"f.bin"});
  }

  TEST_CASE("read_file_text reads files whose size stat reports as 0, such as /proc's") {
    struct stat st {};
    REQUIRE(::stat("/proc/self/status", &st) == 0);
    REQUIRE(st.st_size == 0);  // the case under test: the size is unknown until read
    const std::string status = read_file_text("/proc/self/status");
    CHECK(contains(status, "Name:"));
    CHECK(contains(status, "Pid:\t" + std::to_string(::getpid()) + "\n"));
    const std::vector<uint8_t> bytes = read_file_bytes("/proc/self/status");
    CHECK(bytes.size() > 100);
    CHECK(bytes.back() == '\n');
  }

  TEST_CASE("crc32_file over a file of several 4 MiB read chunks equals the bit-at-a-time CRC") {
    TempDir dir("fileio");
    std::string data((size_t(9) << 20) + 3, '\0');
    std::mt19937_64 rng(11);
    for (char& c : data) c = char(rng());
    write_raw(dir / "big", data);
    CHECK(crc32_file(dir / "big") ==
          reference_crc32(reinterpret_cast<const uint8_t*>(data.data()), data.size()));
  }
}

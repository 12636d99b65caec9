// The rendezvous' wire format (dist/rendezvous_wire.h) byte by byte, checked against the layout written
// out here by hand (magic "DFRV", type, aux, length as big-endian u32, then the body), and a foreign client
// on rank 0's port that the ranks must ignore.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <thread>

#include "dist/rendezvous.h"
#include "dist/rendezvous_wire.h"
#include "runtime/error.h"
#include "tests/process_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::rendezvous_detail;
using dflash::test::fork_child;
using dflash::test::free_port;
using dflash::test::rendezvous_options;
using dflash::test::wait_child;

namespace {
std::string be32(uint32_t v) {
  const char b[4] = {char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
  return std::string(b, 4);
}
}  // namespace

TEST_SUITE("rendezvous wire") {
  TEST_CASE("frames: the documented bytes; taken only once whole, however the bytes arrive; the rest stays") {
    const std::string body("ab\0c", 4);
    const std::string one = frame(kGather, 7, body);
    CHECK(one == "DFRV" + be32(kGather) + be32(7) + be32(4) + body);
    const std::string two = frame(kBye, 0, "");
    const std::string stream = one + two + one.substr(0, 9);
    std::string buf;
    std::vector<Frame> got;
    for (size_t i = 0; i < stream.size(); ++i) {  // one byte at a time: no frame before its last byte
      buf += stream[i];
      while (auto f = take_frame(buf)) got.push_back(*f);
      const size_t seen = i + 1;
      const size_t whole = seen < one.size() ? 0 : seen < one.size() + two.size() ? 1 : 2;
      REQUIRE(got.size() == whole);
      CHECK(buf.size() == seen - (whole >= 1 ? one.size() : 0) - (whole >= 2 ? two.size() : 0));
    }
    CHECK(got[0].type == kGather);
    CHECK(got[0].aux == 7);
    CHECK(got[0].body == body);
    CHECK(got[1].type == kBye);
    CHECK(got[1].body.empty());
    CHECK(buf == one.substr(0, 9));  // the next frame's start waits in the buffer
  }

  TEST_CASE("frames: foreign bytes and a length over 64 MiB are refused") {
    std::string http = "GET / HTTP/1.0\r\n\r\n";
    CHECK_THROWS_WITH_AS(take_frame(http), "not a dflash rendezvous message", Error);
    std::string huge = "DFRV" + be32(kGather) + be32(0) + be32((64u << 20) + 1);
    CHECK_THROWS_WITH_AS(take_frame(huge), "a rendezvous message of 67108865 bytes is too large", Error);
    std::string largest = "DFRV" + be32(kGather) + be32(0) + be32(64u << 20);
    CHECK_FALSE(take_frame(largest).has_value());  // allowed; its body has not arrived
  }

  TEST_CASE("gathers: pack is each part's big-endian length then its bytes; a cut result is refused") {
    const std::vector<std::string> parts = {"rank 0", "", std::string("\0\xff", 2)};
    const std::string packed = pack(parts);
    CHECK(packed == be32(6) + "rank 0" + be32(0) + be32(2) + std::string("\0\xff", 2));
    CHECK(unpack(packed) == parts);
    CHECK_THROWS_WITH_AS(unpack(packed.substr(0, packed.size() - 1)), "rendezvous: a malformed gather result", Error);
    CHECK_THROWS_WITH_AS(unpack(be32(7) + "rank 0"), "rendezvous: a malformed gather result", Error);
  }

  TEST_CASE("a foreign client on rank 0's port (a port scanner) is ignored; the ranks still meet") {
    const int port = free_port();
    pid_t child = fork_child([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(600));  // after the scanner
      auto r = Rendezvous::join(rendezvous_options(1, 2, "127.0.0.1", port));
      std::vector<std::string> all = r->all_gather("1");
      r->finish();
      return all.size() == 2 && all[0] == "0" && all[1] == "1" ? 0 : 1;
    });
    std::thread scanner([&] {  // connects as soon as rank 0 listens, sends bytes that are not a frame
      sockaddr_in a{};
      a.sin_family = AF_INET;
      a.sin_port = htons(uint16_t(port));
      a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
      for (int tries = 0; tries < 100; ++tries) {
        int fd = ::socket(AF_INET, SOCK_STREAM, 0);
        if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
          const std::string http = "GET / HTTP/1.0\r\n\r\n";
          (void)::send(fd, http.data(), http.size(), MSG_NOSIGNAL);
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          ::close(fd);
          return;
        }
        ::close(fd);
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    });
    auto r = Rendezvous::join(rendezvous_options(0, 2, "127.0.0.1", port));
    scanner.join();
    std::vector<std::string> all = r->all_gather("0");
    r->finish();
    CHECK(all == std::vector<std::string>{"0", "1"});
    CHECK(wait_child(child) == 0);
  }
}

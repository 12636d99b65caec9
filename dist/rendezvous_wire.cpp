// The rendezvous' wire format and socket reads and writes; see rendezvous_wire.h.
#include "dist/rendezvous_wire.h"

#include <arpa/inet.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "runtime/error.h"

namespace dflash::rendezvous_detail {
namespace {
constexpr uint32_t kMagic = 0x44465256;  // "DFRV"
constexpr uint32_t kMaxFrame = 64u << 20;
}  // namespace

double seconds_until(Clock::time_point t) { return std::chrono::duration<double>(t - Clock::now()).count(); }
Clock::time_point after(double s) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(s));
}

std::string host_name() {
  char buf[256] = {};
  ::gethostname(buf, sizeof buf - 1);
  return buf;
}

std::string frame(uint32_t type, uint32_t aux, const std::string& body) {
  uint32_t h[4] = {htonl(kMagic), htonl(type), htonl(aux), htonl(uint32_t(body.size()))};
  std::string out(reinterpret_cast<const char*>(h), sizeof h);
  return out + body;
}

bool send_all(int fd, const std::string& bytes) {
  size_t done = 0;
  while (done < bytes.size()) {
    ssize_t n = ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    done += size_t(n);
  }
  return true;
}


std::optional<Frame> take_frame(std::string& buf) {
  if (buf.size() < 16) return std::nullopt;
  uint32_t h[4];
  std::memcpy(h, buf.data(), 16);
  if (ntohl(h[0]) != kMagic) throw Error("not a dflash rendezvous message");
  const uint32_t len = ntohl(h[3]);
  if (len > kMaxFrame) throw Error("a rendezvous message of " + std::to_string(len) + " bytes is too large");
  if (buf.size() < 16 + size_t(len)) return std::nullopt;
  Frame f{ntohl(h[1]), ntohl(h[2]), buf.substr(16, len)};
  buf.erase(0, 16 + size_t(len));
  return f;
}

std::optional<Frame> read_frame(int fd, std::string& buf, Clock::time_point deadline) {
  for (;;) {
    if (auto f = take_frame(buf)) return f;
    const double left = seconds_until(deadline);
    if (left <= 0) return std::nullopt;
    pollfd p{fd, POLLIN, 0};
    int r = ::poll(&p, 1, int(std::min(left, 1.0) * 1000) + 1);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) continue;
    char tmp[4096];
    ssize_t n = ::recv(fd, tmp, sizeof tmp, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) throw Error(n == 0 ? "the connection was closed" : std::string("recv: ") + std::strerror(errno));
    buf.append(tmp, size_t(n));
  }
}

std::string pack(const std::vector<std::string>& parts) {
  std::string out;
  for (const std::string& p : parts) {
    uint32_t n = htonl(uint32_t(p.size()));
    out.append(reinterpret_cast<const char*>(&n), 4);
    out += p;
  }
  return out;
}

std::vector<std::string> unpack(const std::string& bytes) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at + 4 <= bytes.size()) {
    uint32_t n;
    std::memcpy(&n, bytes.data() + at, 4);
    n = ntohl(n);
    at += 4;
    DF_CHECK(at + n <= bytes.size(), "rendezvous: a malformed gather result");
    out.push_back(bytes.substr(at, n));
    at += n;
  }
  return out;
}

}  // namespace dflash::rendezvous_detail

// CRC-32, slice-by-8: eight lookup tables let the loop fold 8 input bytes per step (little-endian host).
#include "runtime/checksum.h"

#include <fcntl.h>
#include <unistd.h>

#include <array>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <vector>

#include "runtime/error.h"

namespace dflash {

namespace {

static_assert(std::endian::native == std::endian::little, "the slice-by-8 loop assumes a little-endian host");

constexpr uint32_t kPolynomial = 0xedb88320u;  // 0x04c11db7 bit-reversed

using Tables = std::array<std::array<uint32_t, 256>, 8>;

// tables[0][b]: the CRC register after shifting byte b through it; tables[k][b]: the same byte
// followed by k zero bytes, so 8 bytes can be folded with 8 independent lookups.
constexpr Tables make_tables() {
  Tables t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t c = b;
    for (int i = 0; i < 8; ++i) c = (c & 1u) ? (c >> 1) ^ kPolynomial : c >> 1;
    t[0][b] = c;
  }
  for (size_t k = 1; k < 8; ++k)
    for (uint32_t b = 0; b < 256; ++b) t[k][b] = (t[k - 1][b] >> 8) ^ t[0][t[k - 1][b] & 0xffu];
  return t;
}

constexpr Tables kTables = make_tables();

}  // namespace

void Crc32::update(const void* data, size_t bytes) {
  const uint8_t* p = static_cast<const uint8_t*>(data);
  uint32_t c = state_;
  while (bytes >= 8) {
    uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;
    c = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^ kTables[5][(lo >> 16) & 0xffu] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu] ^ kTables[2][(hi >> 8) & 0xffu] ^
        kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
    p += 8;
    bytes -= 8;
  }
  while (bytes-- > 0) c = (c >> 8) ^ kTables[0][(c ^ *p++) & 0xffu];
  state_ = c;
}

uint32_t crc32(const void* data, size_t bytes) {
  Crc32 c;
  c.update(data, bytes);
  return c.value();
}

uint32_t crc32_file(const std::filesystem::path& path) {
  int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  DF_CHECK(fd >= 0, "checksum: cannot open '" << path.string() << "': " << std::strerror(errno)
                                              << "; fix: check the path and its permissions");
  std::vector<uint8_t> buffer(size_t(4) << 20);
  Crc32 c;
  for (;;) {
    ssize_t n = ::read(fd, buffer.data(), buffer.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      int err = errno;
      ::close(fd);
      DF_FAIL("checksum: reading '" << path.string() << "' failed: " << std::strerror(err));
    }
    if (n == 0) break;
    c.update(buffer.data(), size_t(n));
  }
  ::close(fd);
  return c.value();
}

std::string crc32_hex(uint32_t crc) {
  char text[9];
  std::snprintf(text, sizeof text, "%08x", crc);
  return text;
}

}  // namespace dflash

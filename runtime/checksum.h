// CRC-32 (IEEE 802.3 / zlib polynomial, reflected; check value of "123456789" is cbf43926), used
// to detect damaged checkpoint files. Incremental, over memory or over a whole file.
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <string>

namespace dflash {

class Crc32 {
 public:
  void update(const void* data, size_t bytes);
  uint32_t value() const { return ~state_; }

 private:
  uint32_t state_ = 0xffffffffu;
};

uint32_t crc32(const void* data, size_t bytes);

// The CRC-32 of a file's bytes, read in chunks. Throws Error naming the path and the OS error.
uint32_t crc32_file(const std::filesystem::path& path);

// Eight lowercase hex digits, as checkpoint markers store it.
std::string crc32_hex(uint32_t crc);

}  // namespace dflash

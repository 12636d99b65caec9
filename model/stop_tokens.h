// The target's stop ids for decoding: config.json's eos_token_id, an int, a list of ints, or
// null / absent for none (docs/MODEL.md, "Speculative decoding", step 3).
#pragma once
#include <cstdint>
#include <filesystem>
#include <vector>

namespace dflash {

// Reads dir/config.json's eos_token_id; every id must lie in [0, vocab_size). Errors name the file,
// the key and the value.
std::vector<int32_t> read_eos_token_ids(const std::filesystem::path& dir, int64_t vocab_size);

}  // namespace dflash

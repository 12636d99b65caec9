// eos_token_id from a Hugging Face config.json.
#include "model/stop_tokens.h"

#include <nlohmann/json.hpp>

#include "runtime/error.h"
#include "runtime/fileio.h"

namespace dflash {

std::vector<int32_t> read_eos_token_ids(const std::filesystem::path& dir, int64_t vocab_size) {
  const std::string file = (dir / "config.json").string();
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(read_file_text(dir / "config.json"));
  } catch (const nlohmann::json::exception& e) {
    DF_FAIL("target config '" << file << "' is not valid JSON (" << e.what() << ")");
  }
  std::vector<int32_t> ids;
  auto it = j.find("eos_token_id");
  if (it == j.end() || it->is_null()) return ids;
  const nlohmann::json list = it->is_array() ? *it : nlohmann::json::array({*it});
  for (const auto& v : list) {
    DF_CHECK(v.is_number_integer() && v.get<int64_t>() >= 0 && v.get<int64_t>() < vocab_size,
             "target config '" << file << "': eos_token_id holds " << v.dump() << "; it must be a token id in [0, "
                               << vocab_size << ") (an int, a list of them, or null); fix the file, or set "
                               << "eval.spec_stop_token_ids (or eval.spec_ignore_eos = true) in the config");
    ids.push_back(int32_t(v.get<int64_t>()));
  }
  return ids;
}

}  // namespace dflash

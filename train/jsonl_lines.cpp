// The reader of prompts files of one JSON value per line (train/jsonl_lines.h).
#include "train/jsonl_lines.h"

#include <fstream>

#include "runtime/error.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

void read_json_lines(const fs::path& file, const std::string& what, const std::string& fix,
                     const std::function<void(const json& value, const std::string& where)>& each_line) {
  std::error_code ec;
  DF_CHECK(fs::is_regular_file(file, ec), what << " " << file.string() << " not found; " << fix);
  std::ifstream in(file);
  DF_CHECK(in, what << " " << file.string() << " cannot be read; check its permissions");
  std::string line;
  for (int64_t no = 1; std::getline(in, line); ++no) {
    if (line.find_first_not_of(" \t\r") == std::string::npos) continue;
    const std::string where = file.string() + ":" + std::to_string(no);
    json j;
    try {
      j = json::parse(line);
    } catch (const json::exception& e) {
      DF_FAIL(where << ": not valid JSON (" << e.what() << "); " << fix);
    }
    each_line(j, where);
  }
}

}  // namespace dflash

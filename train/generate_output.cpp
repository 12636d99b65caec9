// The prompts, header, records, parts and merge of `dflash-train generate`.
#include "train/generate_output.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <sstream>

#include "runtime/error.h"
#include "runtime/fileio.h"
#include "runtime/splitmix.h"
#include "train/data_fingerprint.h"
#include "train/jsonl_lines.h"

namespace dflash {

namespace fs = std::filesystem;
using json = nlohmann::json;

namespace {
constexpr const char* kFormat = "dflash-train generate";

uint64_t hash_text(const std::string& s) {
  Hash64 h;
  h.update(s.data(), s.size());
  return h.value();
}

// An fd holding an exclusive flock until destroyed.
struct LockedFd {
  int fd = -1;
  ~LockedFd() {
    if (fd >= 0) ::close(fd);  // closing drops the lock
  }
};
}  // namespace

std::vector<GeneratePrompt> read_generate_prompts(const fs::path& file) {
  const std::string fix = "fix: write one {\"id\": ..., \"prompt_ids\": [...]} per line (dflash-data prepare "
                          "--generate-prompts writes them)";
  std::vector<GeneratePrompt> out;
  std::map<std::string, std::string> seen;  // id key -> where
  read_json_lines(file, "--prompts", fix, [&](const json& j, const std::string& where) {
    DF_CHECK(j.is_object() && j.contains("id") && j.contains("prompt_ids") && j["prompt_ids"].is_array(),
             where << ": needs \"id\" and a \"prompt_ids\" array; " << fix);
    const json& id = j["id"];
    DF_CHECK(id.is_string() || id.is_number_integer(),
             where << ": id " << id.dump() << " must be a string or an integer; " << fix);
    GeneratePrompt p{id, id.dump(), {}, where};
    for (const json& v : j["prompt_ids"]) {
      DF_CHECK(v.is_number_integer() && v.get<int64_t>() >= INT32_MIN && v.get<int64_t>() <= INT32_MAX,
               where << ": prompt_ids holds " << v.dump() << ", not a token id (an integer)");
      p.ids.push_back(int32_t(v.get<int64_t>()));
    }
    const auto [it, fresh] = seen.emplace(p.key, where);
    DF_CHECK(fresh, where << ": id " << p.key << " is given twice (first at " << it->second
                          << "); each prompt needs its own id: the output names records by it and a rerun skips "
                             "the ids already written; fix: make the ids unique");
    out.push_back(std::move(p));
  });
  DF_CHECK(!out.empty(), "--prompts " << file.string() << " holds no prompt; " << fix);
  return out;
}

uint64_t generate_sample_key(uint64_t seed, const std::string& id_key) {
  return splitmix64(splitmix64(seed) ^ hash_text(id_key));
}

json generate_header(const json& settings) {
  json h = {{"format", kFormat}, {"config_hash", hash64_hex(hash_text(settings.dump()))}};
  for (auto it = settings.begin(); it != settings.end(); ++it) h[it.key()] = it.value();
  return h;
}

std::vector<std::string> header_differences(const json& in_file, const json& now) {
  std::vector<std::string> diff;
  std::set<std::string> keys;
  for (auto it = in_file.begin(); it != in_file.end(); ++it) keys.insert(it.key());
  for (auto it = now.begin(); it != now.end(); ++it) keys.insert(it.key());
  keys.erase("config_hash");  // it differs exactly when a field below does
  for (const std::string& k : keys) {
    const json a = in_file.contains(k) ? in_file[k] : json(), b = now.contains(k) ? now[k] : json();
    if (a != b) diff.push_back(k + ": " + (a.is_null() ? "absent" : a.dump()) + " in the file, " +
                               (b.is_null() ? "absent" : b.dump()) + " now");
  }
  if (diff.empty() && in_file.value("config_hash", "") != now.value("config_hash", ""))
    diff.push_back("config_hash: " + in_file.value("config_hash", "") + " in the file, " +
                   now.value("config_hash", "") + " now");
  return diff;
}

fs::path generate_part_path(const fs::path& output, int rank, int world) {
  return world > 1 ? fs::path(output.string() + ".rank-" + std::to_string(rank)) : output;
}

std::vector<fs::path> generate_parts(const fs::path& output) {
  std::vector<fs::path> parts;
  std::error_code ec;
  if (fs::is_regular_file(output, ec)) parts.push_back(output);
  const fs::path dir = output.has_parent_path() ? output.parent_path() : fs::path(".");
  const std::string prefix = output.filename().string() + ".rank-";
  std::vector<fs::path> ranks;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(prefix, 0) == 0 && name.size() > prefix.size() &&
        name.find_first_not_of("0123456789", prefix.size()) == std::string::npos && e.is_regular_file(ec))
      ranks.push_back(e.path());
  }
  std::sort(ranks.begin(), ranks.end());
  parts.insert(parts.end(), ranks.begin(), ranks.end());
  return parts;
}

GenerateFile read_generate_file(const fs::path& file, const json& header, bool repair,
                                const std::map<std::string, const GeneratePrompt*>& prompts) {
  GenerateFile out;
  std::error_code ec;
  if (!fs::exists(file, ec)) return out;
  const std::string text = read_file_text(file);
  size_t at = 0, good = 0;  // good: the bytes up to the last whole, valid line
  for (int64_t no = 1; at < text.size(); ++no) {
    const size_t end = text.find('\n', at);
    const std::string where = file.string() + ":" + std::to_string(no);
    if (end == std::string::npos) break;  // torn: no newline
    json j;
    try {
      j = json::parse(text.substr(at, end - at));
    } catch (const json::exception&) {
      if (end + 1 == text.size()) break;  // a torn last line (its newline came with a later write)
      DF_FAIL(where << ": not valid JSON inside the file (only a last line can be torn by a crash); fix: remove "
                    << "the line, or move the file away and generate again");
    }
    if (no == 1) {
      DF_CHECK(j.is_object() && j.value("format", "") == kFormat,
               where << ": not a dflash-train generate header; fix: choose another --output, or move this file away");
      const std::vector<std::string> diff = header_differences(j, header);
      if (!diff.empty()) {
        std::string all;
        for (const std::string& d : diff) all += "\n  " + d;
        DF_FAIL(file.string() << " was generated with other settings, so its records cannot be continued:" << all
                              << "\nfix: rerun with the settings of the file, or choose another --output");
      }
      out.has_header = true;
    } else {
      DF_CHECK(j.is_object() && j.contains("id") && j.contains("prompt_ids") && j.contains("output_ids") &&
                   j.contains("finish"),
               where << ": not a generate record (id, prompt_ids, output_ids, finish); fix: remove the line");
      const std::string key = j["id"].dump();
      const auto p = prompts.find(key);
      if (p != prompts.end())
        DF_CHECK(j["prompt_ids"] == json(p->second->ids),
                 where << ": id " << key << " was generated from other prompt_ids than " << p->second->where
                       << " holds now; fix: give changed prompts new ids, or move " << file.string() << " away");
      DF_CHECK(out.records.emplace(key, std::move(j)).second,
               where << ": id " << key << " is written twice; fix: remove one of the lines");
    }
    at = good = end + 1;
  }
  if (good < text.size()) {
    out.torn_bytes = int64_t(text.size() - good);
    if (repair) {
      fs::resize_file(file, good, ec);
      DF_CHECK(!ec, file.string() << ": cannot cut its torn last line (" << ec.message() << "); fix: check the file's "
                                  << "permissions and the disk");
    }
  }
  return out;
}

GenerateAppender::GenerateAppender(const fs::path& file, const json& header) : file_(file) {
  fd_ = ::open(file.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  DF_CHECK(fd_ >= 0, "--output: cannot open " << file.string() << " for appending (" << std::strerror(errno)
                                              << "); fix: choose a path in an existing, writable folder");
  if (::flock(fd_, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    ::close(fd_);
    fd_ = -1;
    DF_FAIL("--output: " << file.string() << " is being written by another process (its lock is held: "
                         << std::strerror(err) << "); fix: wait for it, or choose another --output");
  }
  if (::lseek(fd_, 0, SEEK_END) == 0) write_line(header.dump());
}

GenerateAppender::~GenerateAppender() {
  if (fd_ >= 0) ::close(fd_);
}

void GenerateAppender::append(const json& record) { write_line(record.dump()); }

void GenerateAppender::write_line(const std::string& text) {
  const std::string line = text + "\n";
  const ssize_t n = ::write(fd_, line.data(), line.size());
  DF_CHECK(n == ssize_t(line.size()), "--output: writing " << file_.string() << " failed ("
                                                           << (n < 0 ? std::strerror(errno) : "a short write")
                                                           << "); fix: free space, then rerun the same command: it "
                                                              "continues where this stopped");
}

json generate_record(const GeneratePrompt& p, const std::vector<int32_t>& output, bool stopped) {
  return {{"id", p.id}, {"prompt_ids", p.ids}, {"output_ids", output}, {"finish", stopped ? "stop" : "length"}};
}

bool merge_generate_parts(const fs::path& output, const json& header, const std::vector<GeneratePrompt>& prompts,
                          int64_t* written) {
  LockedFd lock;
  const std::string lock_file = output.string() + ".merge-lock";
  lock.fd = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  DF_CHECK(lock.fd >= 0, "--output: cannot create " << lock_file << " (" << std::strerror(errno)
                                                    << "); fix: choose an --output in a writable folder");
  DF_CHECK(::flock(lock.fd, LOCK_EX) == 0, "--output: cannot lock " << lock_file << " (" << std::strerror(errno)
                                                                    << "); fix: put --output on a file system with "
                                                                       "working locks");
  std::map<std::string, const GeneratePrompt*> by_key;
  for (const GeneratePrompt& p : prompts) by_key[p.key] = &p;
  const std::vector<fs::path> parts = generate_parts(output);
  std::map<std::string, json> records;
  for (const fs::path& part : parts)
    for (auto& [key, record] : read_generate_file(part, header, false, by_key).records) {
      const auto [it, fresh] = records.emplace(key, record);
      DF_CHECK(fresh || it->second == record, "--output: id " << key << " has two different records (one in "
                                                              << part.string() << "); fix: remove one of them");
    }
  int64_t have = 0;
  for (const GeneratePrompt& p : prompts) have += records.count(p.key) ? 1 : 0;
  if (written) *written = have;
  bool in_order = parts.size() == 1 && parts[0] == output;  // one file already in the prompts' order?
  if (in_order) {
    const std::string text = read_file_text(output);
    std::string want = header.dump() + "\n";
    for (const GeneratePrompt& p : prompts)
      if (records.count(p.key)) want += records[p.key].dump() + "\n";
    in_order = records.size() == size_t(have) && text == want;
  }
  if (have < int64_t(prompts.size())) return false;
  if (!in_order) {
    std::ostringstream all;
    all << header.dump() << "\n";
    for (const GeneratePrompt& p : prompts) all << records[p.key].dump() << "\n";
    for (const auto& [key, record] : records)
      if (!by_key.count(key)) all << record.dump() << "\n";  // records of prompts no longer given stay, at the end
    write_file_atomic(output, all.str());
  }
  std::error_code ec;
  for (const fs::path& part : parts)
    if (part != output) fs::remove(part, ec);
  fs::remove(lock_file, ec);
  return true;
}

}  // namespace dflash

// The files of `dflash-train generate` (docs/data-formats.md, "Regenerated responses"): the prompts
// ({"id", "prompt_ids"} per line), and the output: a header line naming what decides the outputs,
// then one record {"id", "prompt_ids", "output_ids", "finish"} per line, each appended by one
// write(2), so a crash leaves at most a torn last line. Several ranks each append to their own
// part (OUT.rank-K) and every rank reads every part; the parts merge by id into OUT.
#pragma once
#include <cstdint>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace dflash {

struct GeneratePrompt {
  nlohmann::json id;        // as given: a string or an integer
  std::string key;          // the id's JSON text: what identifies the prompt in every file
  std::vector<int32_t> ids;
  std::string where;        // "prompts.jsonl:3", for messages
};

// {"id": string or integer, "prompt_ids": [token ids]} per line (blank lines skipped). Refuses a
// missing or empty file, a line that is not such an object, and an id given twice (naming both
// lines); an empty prompt_ids or ids outside the vocabulary are left to the per-request check.
std::vector<GeneratePrompt> read_generate_prompts(const std::filesystem::path& file);

// The request's random stream when sampling: a function of the seed and the id's JSON text only,
// so a prompt draws the same numbers whatever its batch, slot, rank or place in the file.
uint64_t generate_sample_key(uint64_t seed, const std::string& id_key);

// What decides the outputs, as the header holds it: the target's dims and weights checksum,
// max_new_tokens, the sampling settings, the seed, the stop ids and the precision; config_hash
// is XXH64 of all of them (batch size, prefill chunk and ranks are left out: they change no
// output on the CPU).
nlohmann::json generate_header(const nlohmann::json& settings);
// "key: A in FILE, B now" for every header field that differs (empty: the same).
std::vector<std::string> header_differences(const nlohmann::json& in_file, const nlohmann::json& now);

// OUT itself (one process) or OUT.rank-K (rank K of a world of W > 1).
std::filesystem::path generate_part_path(const std::filesystem::path& output, int rank, int world);
// OUT and every OUT.rank-* beside it that exist.
std::vector<std::filesystem::path> generate_parts(const std::filesystem::path& output);

// The records of one output file, by id key. The header must equal `header` (otherwise refused,
// naming the file and each difference). A last line without its newline, or not valid JSON, is
// torn: with `repair` the file is cut back before it (torn_bytes says how much), else it is
// ignored (another rank may be writing it). A record must carry the prompt's ids of `prompts`
// (by id key) when the id is there, or it is refused naming the line.
struct GenerateFile {
  std::map<std::string, nlohmann::json> records;
  int64_t torn_bytes = 0;
  bool has_header = false;
};
GenerateFile read_generate_file(const std::filesystem::path& file, const nlohmann::json& header, bool repair,
                                const std::map<std::string, const GeneratePrompt*>& prompts);

// Appends records to one file: created with the header when missing or empty; an flock held
// while it is open refuses a second writer of the same file. Each line is one write(2).
class GenerateAppender {
 public:
  GenerateAppender(const std::filesystem::path& file, const nlohmann::json& header);
  ~GenerateAppender();
  GenerateAppender(const GenerateAppender&) = delete;
  GenerateAppender& operator=(const GenerateAppender&) = delete;
  void append(const nlohmann::json& record);

 private:
  void write_line(const std::string& line);
  std::filesystem::path file_;
  int fd_ = -1;
};

// One record: {"id", "prompt_ids", "output_ids", "finish": "stop" | "length"}.
nlohmann::json generate_record(const GeneratePrompt& p, const std::vector<int32_t>& output, bool stopped);

// Under a lock on OUT.merge-lock: when the files of generate_parts(output) hold a record of every
// prompt, writes OUT anew (the header, then the records in the prompts' order), fsynced and renamed
// into place, and removes the rank parts. Returns whether it did; *written counts the prompts
// with a record (when not null).
bool merge_generate_parts(const std::filesystem::path& output, const nlohmann::json& header,
                          const std::vector<GeneratePrompt>& prompts, int64_t* written = nullptr);

}  // namespace dflash

// Reading a prompts file of one JSON value per line, as `dflash-train generate` and `spec` take it
// (docs/data-formats.md): the file and line checks both share, the values left to the caller.
#pragma once
#include <filesystem>
#include <functional>
#include <string>

#include <nlohmann/json.hpp>

namespace dflash {

// Hands each non-blank line of `file` (only spaces, tabs or a CR: blank), parsed, to each_line in
// order, with its place "FILE:N" (N from 1, blank lines counted) for messages. Refuses a missing
// file ("WHAT FILE not found; FIX"), an unreadable one, and a line that is not JSON ("FILE:N: not
// valid JSON (...); FIX"). `what` names the file's role, e.g. "--prompts"; `fix` says what to write.
void read_json_lines(const std::filesystem::path& file, const std::string& what, const std::string& fix,
                     const std::function<void(const nlohmann::json& value, const std::string& where)>& each_line);

}  // namespace dflash

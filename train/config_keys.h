// The config's keys as data: each leaf key's dotted name, type and struct field, and the text
// helpers messages use (values, examples, "did you mean"). Internal to train/config.cpp.
#pragma once
#include <string>
#include <vector>

#include "train/config.h"

namespace dflash::config_detail {

enum class Kind { integer, optional_integer, seed, number, boolean, text, path, integer_list, text_list };

// One leaf key: its dotted name (exactly the struct member path), its type, and where it lives.
struct Field {
  const char* key;
  Kind kind;
  void* (*at)(Config&);
};

const std::vector<Field>& fields();
extern const std::vector<std::string> kSections;    // tables, dotted: "job", "target.synthetic", ...
extern const std::vector<std::string> kBucketKeys;  // seq, anchors, batch

const Field* find_field(const std::string& key);  // nullptr when unknown
bool is_section(const std::string& key);
std::vector<std::string> all_keys();
std::string keys_of_section(const std::string& section);  // "steps, lr, ..."
std::string leaf_of(const std::string& key);

std::string fmt_double(double v);
std::string quote(const std::string& s);
std::string value_text(Config& c, const Field& f);  // the field's value as TOML would write it
const char* expected_type(Kind k);
std::string example(const Field& f);  // "training.steps = 100": an assignment that fixes a type error

// "; did you mean X?" for the nearest candidate within edit distance 2, else for candidates with the
// same last component (a key put in the wrong section); "" when nothing is near.
std::string suggestion(const std::string& key, const std::vector<std::string>& candidates);

}  // namespace dflash::config_detail

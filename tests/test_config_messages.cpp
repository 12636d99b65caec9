// The hints of an unknown key's refusal: a key within two edits is suggested, and otherwise the
// section's own keys are listed (those of its subsections have their own section); the key text the
// hints are built from (leaves, edits, fixed-width numbers).
#include <doctest/doctest.h>

#include "runtime/error.h"
#include "train/config.h"
#include "train/config_keys.h"

using namespace dflash;

namespace {

// The smallest valid file, before the section under test.
const std::string kBase = R"(
[drafter]
mask_token_id = 5
[[buckets]]
seq = 64
anchors = 4
batch = 2
)";

std::string refusal(const std::string& text) {
  try {
    parse_config(kBase + text, "cfg/x.toml");
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

}  // namespace

TEST_SUITE("config") {
  TEST_CASE("an unknown key two edits from a known one is suggested; three edits away it is not") {
    const std::string base = "[target]\npath = \"t\"\n[data]\ntrain = \"d.jsonl\"\n[training]\n";
    // Two letters swapped: two substitutions.
    CHECK(ends_with(refusal(base + "max_gard_norm = 1.0\n"),
                    "unknown key training.max_gard_norm; did you mean training.max_grad_norm?"));
    // Two letters dropped.
    CHECK(ends_with(refusal(base + "wamup_rato = 0.1\n"), "unknown key training.wamup_rato; did you mean training.warmup_ratio?"));
    // Three edits: no suggestion, the section's keys instead.
    const std::string far = refusal(base + "mx_grd_nrm = 1.0\n");
    CHECK(far.find("did you mean") == std::string::npos);
    CHECK(far.find("unknown key training.mx_grd_nrm; the keys of [training] are steps, lr,") != std::string::npos);
  }

  TEST_CASE("an unknown key's refusal lists its section's own keys, without those of its subsections") {
    const std::string t = refusal("[target]\npath = \"t\"\nfrobnicate = 1\n[data]\ntrain = \"d.jsonl\"\n");
    INFO(t);
    CHECK(ends_with(t, "unknown key target.frobnicate; the keys of [target] are path, layer_ids"));
    const std::string d = refusal("[target]\npath = \"t\"\n[data]\ntrain = \"d.jsonl\"\nfrobnicate = 1\n");
    INFO(d);
    CHECK(ends_with(d, "unknown key data.frobnicate; the keys of [data] are train, eval, shards, mode, hidden, overflow, "
                       "shuffle_seed, allow_changed"));
  }

  TEST_CASE("config keys: leaves after the last dot, substitutions as one edit, fixed text up to 10 characters") {
    using namespace config_detail;
    CHECK(leaf_of("target.synthetic.seed") == "seed");
    CHECK(keys_of_section("target.synthetic").rfind("enabled, architecture, vocab_size, ", 0) == 0);
    CHECK(suggestion("training.seed", all_keys()) ==
          "; did you mean job.seed or target.synthetic.seed or data.synthetic.seed or generate.seed?");
    CHECK(suggestion("trainimg.bete1", all_keys()) == "; did you mean training.beta1?");  // two substitutions
    CHECK(fmt_double(1e-8) == "0.00000001");
    CHECK(fmt_double(1234567.25) == "1234567.25");
    CHECK(fmt_double(1e-9) == "1e-09");
  }
}

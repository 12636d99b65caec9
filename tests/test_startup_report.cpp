// The startup report (graphs/startup_report.h, docs/USER_GUIDE.md): byte counts in binary units, the
// table's recompute column and startup.json's per-bucket fields, against values written by hand.
#include <string>

#include <nlohmann/json.hpp>

#include "graphs/startup_report.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

TEST_SUITE("startup-report") {
  TEST_CASE("human_bytes: binary units from 1024 up, whole bytes below, two decimals above") {
    CHECK(human_bytes(0) == "0 B");
    CHECK(human_bytes(1023) == "1023 B");
    CHECK(human_bytes(1024) == "1.00 KiB");
    CHECK(human_bytes(1536) == "1.50 KiB");
    CHECK(human_bytes(size_t(1) << 20) == "1.00 MiB");
    CHECK(human_bytes((size_t(1) << 30) * 3 / 2) == "1.50 GiB");
    CHECK(human_bytes(size_t(1) << 40) == "1.00 TiB");
    CHECK(human_bytes((size_t(1) << 50)) == "1024.00 TiB");  // TiB is the largest unit
  }

  TEST_CASE("the startup report's recompute column and startup.json: F/L, F+Pp/L, and the counts as recorded") {
    ProgramReport none;
    none.name = "update";
    CHECK(recompute_label(none) == "-");  // no segments: no choice
    ProgramReport whole;
    whole.name = "train/64:4x2";
    whole.bucket = {64, 4, 2};
    whole.segments = 5, whole.recomputed = 4;
    CHECK(recompute_label(whole) == "4/5");
    ProgramReport part = whole;
    part.name = "train/128:8x1";
    part.bucket = {128, 8, 1};
    part.recomputed = 4, part.partially_recomputed = 1;  // 3 entirely, 1 in part
    CHECK(recompute_label(part) == "3+1p/5");
    part.recomputed = 2, part.partially_recomputed = 2;
    CHECK(recompute_label(part) == "0+2p/5");
    part.recomputed = 4, part.partially_recomputed = 1;

    StartupReport r;
    r.device = "cpu";
    r.workers = 2;
    r.arena_bytes = 2048;
    r.programs = {whole, part, none};
    const std::string table = format_startup_table(r);
    CHECK(table.find(" 4/5 ") != std::string::npos);
    CHECK(table.find(" 3+1p/5 ") != std::string::npos);
    CHECK(table.find("arena 2.00 KiB") != std::string::npos);

    const nlohmann::json j = startup_json(r);
    REQUIRE(j["programs"].size() == 3);
    REQUIRE(j["buckets"].size() == 2);  // the training programs only
    CHECK(j["buckets"][1]["seq"] == 128);
    CHECK(j["buckets"][1]["segments"] == 5);
    CHECK(j["buckets"][1]["recomputed_segments"] == 4);
    CHECK(j["buckets"][1]["partially_recomputed_segments"] == 1);
    CHECK(j["buckets"][0]["recomputed_segments"] == 4);
    CHECK(j["buckets"][0]["partially_recomputed_segments"] == 0);
    CHECK(j["programs"][2]["name"] == "update");
  }
}

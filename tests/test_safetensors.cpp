// Safetensors reader/writer and the file helpers: byte-exact writer output (an aligned header unpadded),
// crafted bad files (every validation message), conversions against hand-computed values (U8 above 127,
// BOOL bytes other than 0/1 read as 1), the golden files, atomic writes.
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>

#include "runtime/fileio.h"
#include "runtime/safetensors.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;
namespace fs = std::filesystem;

#define CHECK_ERROR(expr, text) \
  CHECK_THROWS_WITH_AS(expr, doctest::Contains(doctest::String(std::string(text).c_str())), Error)

namespace {


std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

template <class T>
std::string bytes_of(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// Written with plain iostreams, independent of the code under test.
void write_raw(const fs::path& p, const std::string& bytes) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
}

std::string read_raw(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), {});
}

fs::path craft(const TempDir& dir, const std::string& header, const std::string& data) {
  fs::path p = dir / "crafted.safetensors";
  write_raw(p, le64(header.size()) + header + data);
  return p;
}

// The message of the dflash::Error that f throws ("" when it throws none).
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const std::string kTwoF32 = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";

}  // namespace

TEST_SUITE("safetensors") {
  TEST_CASE("the writer's bytes match a hand-written file") {
    TempDir dir("st");
    std::vector<float> a = {1.5f, -2.0f};
    std::vector<uint8_t> m = {7, 0, 255};
    write_safetensors(dir / "x.safetensors",
                      {{"a", "F32", {2}, a.data()}, {"m", "U8", {3}, m.data()}}, {{"k", "v"}});
    std::string header = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},)"
                         R"("m":{"dtype":"U8","shape":[3],"data_offsets":[8,11]},"__metadata__":{"k":"v"}})";
    header.append((8 - header.size() % 8) % 8, ' ');
    CHECK(read_raw(dir / "x.safetensors") == le64(header.size()) + header + bytes_of(a) + bytes_of(m));
    CHECK(dir.listing() == std::vector<std::string>{"x.safetensors"});
  }

  TEST_CASE("round trip of F32, BF16, I32 and U8 with metadata") {
    CpuRuntime rt;
    TempDir dir("st");
    std::vector<float> f = {0.25f, -1.0f, 3.5f, 1e-3f, 7.0f, -0.0f};
    std::vector<uint16_t> h = {0x3f80, 0xc040, 0x0000, 0x4000};  // 1, -3, 0, 2
    std::vector<int32_t> i = {-5, 0, 2147483647, -2147483647 - 1};
    std::vector<uint8_t> u = {0, 1, 200};
    fs::path p = dir / "rt.safetensors";
    write_safetensors(p,
                      {{"w.f", "F32", {2, 3}, f.data()},
                       {"w.h", "BF16", {2, 2}, h.data()},
                       {"ids", "I32", {4}, i.data()},
                       {"mask", "U8", {1, 3}, u.data()},
                       {"empty", "F32", {0, 5}, nullptr}},
                      {{"step", "12"}, {"note", "ünïcode"}});
    SafeTensors st(p);
    CHECK(st.names() == std::vector<std::string>{"empty", "ids", "mask", "w.f", "w.h"});
    CHECK(st.metadata() == std::map<std::string, std::string>{{"note", "ünïcode"}, {"step", "12"}});
    CHECK(st.info("w.f").dtype == "F32");
    CHECK(st.info("w.f").shape == std::vector<int64_t>{2, 3});
    CHECK(st.info("w.f").nbytes == 24);
    CHECK(st.info("empty").numel() == 0);
    CHECK(st.has("ids"));
    CHECK_FALSE(st.has("nope"));
    CHECK(st.read_floats("w.f") == f);
    CHECK(st.read_floats("w.h") == std::vector<float>{1.0f, -3.0f, 0.0f, 2.0f});
    CHECK(st.read_ints("ids") == i);
    CHECK(st.read_ints("mask") == std::vector<int32_t>{0, 1, 200});
    CHECK(st.read_floats("empty").empty());
    CHECK(std::memcmp(st.bytes("w.h"), h.data(), 8) == 0);

    Tensor tf = st.load("w.f", DType::f32, Shape{2, 3});
    CHECK(tf.name() == "w.f");
    CHECK(tf.to_floats() == f);
    Tensor th = st.load("w.h", DType::bf16);
    std::vector<uint16_t> th_bits(4);
    th.copy_to_host(th_bits.data(), 8);
    CHECK(th_bits == h);
    CHECK(st.load("ids", DType::i32).to_ints() == i);
    CHECK(st.load("mask", DType::u8, Shape{1, 3}).to_ints() == std::vector<int32_t>{0, 1, 200});

    // The Tensor overload writes the same file a second time from runtime tensors.
    fs::path q = dir / "rt2.safetensors";
    write_safetensors(q, {{"w.f", tf}, {"w.h", th}, {"ids", st.load("ids", DType::i32)}}, {{"step", "12"}});
    SafeTensors st2(q);
    CHECK(st2.info("w.h").dtype == "BF16");
    CHECK(st2.read_floats("w.f") == f);
    CHECK(std::memcmp(st2.bytes("w.h"), h.data(), 8) == 0);
    CHECK(st2.read_ints("ids") == i);
    CHECK(st2.metadata().at("step") == "12");
    CHECK(dir.listing() == std::vector<std::string>{"rt.safetensors", "rt2.safetensors"});
  }

  TEST_CASE("conversions from F16, F64, I64 and BOOL, and to bf16 by rounding") {
    CpuRuntime rt;
    TempDir dir("st");
    std::vector<uint16_t> half = {0x3c00, 0xc000, 0x0001, 0x7bff};  // 1, -2, 2^-24, 65504
    std::vector<double> dbl = {1.5, -1e-3, 1e30};
    std::vector<int64_t> i64 = {-3, 2147483647, 0};
    std::vector<uint8_t> bools = {0, 1, 1, 0};
    std::vector<uint8_t> raw_bools = {0, 2, 255, 1};  // another writer's BOOL bytes: nonzero is true
    std::vector<float> f = {1.0f + 3.0f / 256, 1.0f + 1.0f / 256, -2.0f};
    fs::path p = dir / "conv.safetensors";
    write_safetensors(p, {{"h", "F16", {4}, half.data()},
                          {"d", "F64", {3}, dbl.data()},
                          {"l", "I64", {3}, i64.data()},
                          {"b", "BOOL", {2, 2}, bools.data()},
                          {"rb", "BOOL", {4}, raw_bools.data()},
                          {"f", "F32", {3}, f.data()},
                          {"s", "F32", {}, f.data()}});
    SafeTensors st(p);
    CHECK(st.read_floats("h") == std::vector<float>{1.0f, -2.0f, std::ldexp(1.0f, -24), 65504.0f});
    CHECK(st.read_floats("d") == std::vector<float>{1.5f, float(-1e-3), 1e30f});
    CHECK(st.read_ints("l") == std::vector<int32_t>{-3, 2147483647, 0});
    CHECK(st.read_ints("b") == std::vector<int32_t>{0, 1, 1, 0});
    CHECK(st.info("s").numel() == 1);
    CHECK(st.load("s", DType::f32).shape().ndim == 0);
    CHECK(st.load("h", DType::f32).to_floats() == st.read_floats("h"));
    CHECK(st.load("l", DType::i32, Shape{3}).to_ints() == std::vector<int32_t>{-3, 2147483647, 0});
    CHECK(st.load("b", DType::u8).to_ints() == std::vector<int32_t>{0, 1, 1, 0});
    CHECK(st.read_ints("rb") == std::vector<int32_t>{0, 1, 1, 1});
    CHECK(st.load("rb", DType::u8).to_ints() == std::vector<int32_t>{0, 1, 1, 1});
    CHECK(st.load("rb", DType::i32).to_ints() == std::vector<int32_t>{0, 1, 1, 1});
    // Nearest-even: 1 + 3/256 -> 1 + 4/256 (0x3f82); 1 + 1/256 is a tie -> 1.0 (0x3f80).
    std::vector<uint16_t> bits(3);
    st.load("f", DType::bf16).copy_to_host(bits.data(), 6);
    CHECK(bits == std::vector<uint16_t>{0x3f82, 0x3f80, 0xc000});
    // F16 -> bf16: 1, -2, 2^-24 are exact; 65504 (0x477fe000) rounds up to 65536 (0x4780).
    std::vector<uint16_t> hbits(4);
    st.load("h", DType::bf16).copy_to_host(hbits.data(), 8);
    CHECK(hbits == std::vector<uint16_t>{0x3f80, 0xc000, 0x3380, 0x4780});
  }

  TEST_CASE("wrong-kind reads and loads, range errors and shape mismatches name file, tensor and fix") {
    CpuRuntime rt;
    TempDir dir("st");
    std::vector<int32_t> ids = {1, 2, 3, 4, 5, 6};
    std::vector<float> w = {1, 2, 3, 4, 5, 6};
    std::vector<int64_t> big = {int64_t(1) << 40};
    std::vector<double> huge = {1e300};
    std::vector<float> five(32, 1.0f);
    fs::path p = dir / "kinds.safetensors";
    write_safetensors(p, {{"ids", "I32", {2, 3}, ids.data()},
                          {"w", "F32", {2, 3}, w.data()},
                          {"big", "I64", {1}, big.data()},
                          {"huge", "F64", {1}, huge.data()},
                          {"five", "F32", {1, 2, 2, 2, 4}, five.data()}});
    SafeTensors st(p);
    CHECK_THROWS_WITH_AS(st.read_floats("ids"), doctest::Contains("tensor 'ids' is I32; read_floats reads F32, BF16, F16 and F64"), Error);
    CHECK_THROWS_WITH_AS(st.read_ints("w"), doctest::Contains("tensor 'w' is F32; read_ints reads I32, I64, U8 and BOOL"), Error);
    CHECK_THROWS_WITH_AS(st.read_ints("big"), doctest::Contains("I64 value 1099511627776 at index 0 ([0]) does not fit in int32"), Error);
    CHECK_THROWS_WITH_AS(st.read_floats("huge"), doctest::Contains("is beyond the f32 range"), Error);
    CHECK_THROWS_WITH_AS(st.load("ids", DType::f32), doctest::Contains("is I32 and cannot be loaded as f32 (which takes F32, BF16, F16, F64)"), Error);
    CHECK_THROWS_WITH_AS(st.load("w", DType::i32), doctest::Contains("is F32 and cannot be loaded as i32"), Error);
    CHECK_THROWS_WITH_AS(st.load("w", DType::u8), doctest::Contains("cannot be loaded as u8 (which takes U8, BOOL)"), Error);
    CHECK_THROWS_WITH_AS(st.load("huge", DType::bf16), doctest::Contains("cannot be loaded as bf16 (which takes BF16, F32, F16)"), Error);
    CHECK_THROWS_WITH_AS(st.load("five", DType::f32), doctest::Contains("has shape [1,2,2,2,4]; runtime tensors have at most 4"), Error);
    std::string msg = error_of([&] { st.load("w", DType::f32, Shape{3, 2}); });
    INFO(msg);
    CHECK(contains(msg, p.string()));
    CHECK(contains(msg, "tensor 'w' has shape [2,3] but [3,2] was expected"));
    CHECK(contains(msg, "fix: the checkpoint does not match the model config"));
    msg = error_of([&] { st.info("model.w"); });
    CHECK(contains(msg, p.string()));
    CHECK(contains(msg, "tensor 'model.w': no such tensor; the file has 5 tensors ('big', 'five', 'huge', 'ids', 'w')"));
  }

  TEST_CASE("load_into fills a rows() view in place, leaving the rest, and refuses a wrong shape or dtype") {
    CpuRuntime rt;
    TempDir dir("st");
    std::vector<float> a = {1, 2, 3, 4, 5, 6}, b = {-1, -2, -3};
    fs::path p = dir / "parts.safetensors";
    write_safetensors(p, {{"a", "F32", {2, 3}, a.data()}, {"b", "F32", {1, 3}, b.data()}});
    SafeTensors st(p);
    Tensor packed = Tensor::from_floats({4, 3}, std::vector<float>(12, 9.0f));  // rows: a, a, b, untouched
    st.load_into("a", packed.rows(0, 2));
    st.load_into("b", packed.rows(2, 3));
    CHECK(packed.to_floats() == std::vector<float>{1, 2, 3, 4, 5, 6, -1, -2, -3, 9, 9, 9});
    std::string msg = error_of([&] { st.load_into("a", packed.rows(0, 3)); });
    CHECK(contains(msg, p.string()));
    CHECK(contains(msg, "tensor 'a' has shape [2,3] but [3,3] was expected"));
    CHECK_THROWS_WITH_AS(st.load_into("a", Tensor::from_ints({2, 3}, std::vector<int32_t>(6, 0))),
                         doctest::Contains("is F32 and cannot be loaded as i32"), Error);
    CHECK(packed.to_floats() == std::vector<float>{1, 2, 3, 4, 5, 6, -1, -2, -3, 9, 9, 9});  // refused: nothing written
  }

  TEST_CASE("check_finite names the file, tensor and first bad index") {
    TempDir dir("st");
    std::vector<float> f = {1.0f, 2.0f, 3.0f, NAN, INFINITY, 0.0f};
    std::vector<float> g = {1.0f, -INFINITY};
    std::vector<uint16_t> h = {0x3c00, 0x7e00};  // F16 1, NaN
    std::vector<uint16_t> b = {0x3f80, 0xff80};  // BF16 1, -Inf
    std::vector<double> d = {0.0, 1.0, NAN};
    std::vector<int32_t> ok = {1, 2};
    fs::path p = dir / "nan.safetensors";
    write_safetensors(p, {{"f", "F32", {2, 3}, f.data()}, {"g", "F32", {2}, g.data()}, {"h", "F16", {2}, h.data()},
                          {"b", "BF16", {1, 2}, b.data()}, {"d", "F64", {3}, d.data()}, {"i", "I32", {2}, ok.data()}});
    SafeTensors st(p);
    std::string msg = error_of([&] { st.check_finite("f"); });
    CHECK(contains(msg, p.string()));
    CHECK(contains(msg, "tensor 'f' (F32[2,3]) holds NaN at index 3 ([1,0]) (the first non-finite value)"));
    CHECK_THROWS_WITH_AS(st.check_finite("g"), doctest::Contains("holds -Inf at index 1 ([1])"), Error);
    CHECK_THROWS_WITH_AS(st.check_finite("h"), doctest::Contains("tensor 'h' (F16[2]) holds NaN at index 1"), Error);
    CHECK_THROWS_WITH_AS(st.check_finite("b"), doctest::Contains("holds -Inf at index 1 ([0,1])"), Error);
    CHECK_THROWS_WITH_AS(st.check_finite("d"), doctest::Contains("holds NaN at index 2"), Error);
    CHECK_THROWS_WITH_AS(st.check_all_finite(), doctest::Contains("tensor 'b'"), Error);  // sorted: b first
    CHECK_NOTHROW(st.check_finite("i"));
  }

  TEST_CASE("a header padded with spaces, scalars and zero-sized tensors are accepted") {
    TempDir dir("st");
    std::vector<float> v = {4.0f, 5.0f, 6.0f};
    std::string header = R"({"z":{"dtype":"F32","shape":[0],"data_offsets":[4,4]},)"
                         R"("s":{"dtype":"F32","shape":[],"data_offsets":[0,4]},)"
                         R"("t":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},"__metadata__":{}})"
                         "      ";
    SafeTensors st(craft(dir, header, bytes_of(v)));
    CHECK(st.names() == std::vector<std::string>{"s", "t", "z"});
    CHECK(st.read_floats("s") == std::vector<float>{4.0f});
    CHECK(st.read_floats("t") == std::vector<float>{5.0f, 6.0f});
    CHECK(st.read_floats("z").empty());
    CHECK(st.metadata().empty());
  }

  TEST_CASE("every malformed file is refused with a message naming file, tensor and problem") {
    TempDir dir("st");
    const std::string d8(8, '\0'), d12(12, '\0');
    struct Case {
      const char* what;
      std::string header, data, expect;
    };
    auto entry = [](const std::string& body) { return "{\"a\":{" + body + "}}"; };
    const std::vector<Case> cases = {
        {"not JSON", "{\"a\":", d8, "header is not valid JSON"},
        {"not an object", "[1,2]", "", "the header is a JSON array, not an object"},
        {"entry not an object", R"({"a":5})", "", "tensor 'a': the entry is a JSON number, not an object"},
        {"no dtype", entry(R"("shape":[2],"data_offsets":[0,8])"), d8, "tensor 'a': the entry has no \"dtype\""},
        {"no shape", entry(R"("dtype":"F32","data_offsets":[0,8])"), d8, "tensor 'a': the entry has no \"shape\""},
        {"no offsets", entry(R"("dtype":"F32","shape":[2])"), d8, "tensor 'a': the entry has no \"data_offsets\""},
        {"dtype type", entry(R"("dtype":4,"shape":[2],"data_offsets":[0,8])"), d8, "dtype is a JSON number (4), not a string"},
        {"unknown dtype", entry(R"("dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2])"), std::string(2, '\0'),
         "tensor 'a': unknown dtype \"F8_E4M3\"; supported: F32, F16, BF16, F64, I32, I64, U8, BOOL"},
        {"shape type", entry(R"("dtype":"F32","shape":"2","data_offsets":[0,8])"), d8, "shape is a JSON string (\"2\"), not an array"},
        {"shape element", entry(R"("dtype":"F32","shape":[2.0],"data_offsets":[0,8])"), d8, "shape [2.0] holds a JSON number (2.0), not an integer"},
        {"negative dim", entry(R"("dtype":"F32","shape":[-2,1],"data_offsets":[0,8])"), d8, "tensor 'a': shape [-2,1] has a negative dimension -2"},
        {"offsets type", entry(R"("dtype":"F32","shape":[2],"data_offsets":[0])"), d8, "data_offsets is [0], not [begin, end]"},
        {"offsets strings", entry(R"("dtype":"F32","shape":[2],"data_offsets":["0","8"])"), d8, "not [begin, end] (two integers)"},
        {"negative offset", entry(R"("dtype":"F32","shape":[2],"data_offsets":[-8,0])"), d8, "data_offsets [-8,0] has a negative offset"},
        {"begin > end", entry(R"("dtype":"F32","shape":[2],"data_offsets":[8,0])"), d8, "data_offsets [8,0] has begin > end"},
        {"out of range", entry(R"("dtype":"F32","shape":[2],"data_offsets":[4,12])"), d8,
         "data_offsets [4,12] lie outside the data section (8 bytes after the"},
        {"size mismatch", entry(R"("dtype":"F32","shape":[3],"data_offsets":[0,8])"), d8,
         "data_offsets [0,8] cover 8 bytes but F32[3] needs 12 (numel * 4)"},
        {"numel overflow", entry(R"("dtype":"F32","shape":[4294967296,4294967296],"data_offsets":[0,8])"), d8,
         "needs more than 2^64"},
        {"overlap", R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}})",
         d12, "tensors 'a' [0, 8) and 'b' [4, 12) overlap"},
        {"hole", R"({"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"b":{"dtype":"F32","shape":[1],"data_offsets":[8,12]}})",
         d12, "bytes [4, 8) of the data section belong to no tensor (a hole before 'b')"},
        {"trailing hole", entry(R"("dtype":"F32","shape":[1],"data_offsets":[0,4])"), d8,
         "bytes [4, 8) at the end of the data section belong to no tensor (a hole after 'a')"},
        {"duplicate", R"({"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"a":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}})",
         std::string(2, '\0'), "the header lists 'a' twice"},
        {"metadata value", kTwoF32.substr(0, kTwoF32.size() - 1) + R"(,"__metadata__":{"step":3}})", d8,
         "__metadata__ value of 'step' is a JSON number (3), not a string"},
        {"metadata type", kTwoF32.substr(0, kTwoF32.size() - 1) + R"(,"__metadata__":"x"})", d8,
         "__metadata__ is a JSON string, not an object of strings"},
    };
    for (const Case& c : cases) {
      fs::path p = craft(dir, c.header, c.data);
      std::string msg = error_of([&] { SafeTensors st(p); });
      INFO(c.what << ": " << msg);
      CHECK(contains(msg, c.expect));
      CHECK(contains(msg, "safetensors '" + p.string() + "'"));
      CHECK(contains(msg, "fix:"));
    }
    // A good file of the same shape opens, so the cases above fail for the stated reason only.
    CHECK_NOTHROW(SafeTensors(craft(dir, kTwoF32, d8)));
  }

  TEST_CASE("short files, absurd or overlong header lengths and missing files are refused") {
    TempDir dir("st");
    fs::path p = dir / "short.safetensors";
    write_raw(p, "abc");
    std::string msg = error_of([&] { SafeTensors st(p); });
    CHECK(contains(msg, p.string()));
    CHECK(contains(msg, "the file is 3 bytes, shorter than the 8-byte header length"));
    write_raw(p, le64(200ull << 20) + "{}");
    CHECK_THROWS_WITH_AS(SafeTensors{p}, doctest::Contains("header length 209715200 bytes is absurdly large"), Error);
    write_raw(p, le64(64) + "{}");
    CHECK_THROWS_WITH_AS(SafeTensors{p}, doctest::Contains("header length 64 bytes runs past the end of the file (10 bytes)"), Error);
    msg = error_of([&] { SafeTensors st(dir / "missing.safetensors"); });
    CHECK(contains(msg, (dir / "missing.safetensors").string()));
    CHECK(contains(msg, "No such file or directory"));
    CHECK_THROWS_WITH_AS(SafeTensors{dir.path}, doctest::Contains("it is a directory"), Error);
  }

  TEST_CASE("the writer refuses bad entries") {
    TempDir dir("st");
    fs::path p = dir / "w.safetensors";
    float x[2] = {1, 2};
    CHECK_THROWS_WITH_AS(write_safetensors(p, {{"a", "F32", {2}, x}, {"a", "F32", {2}, x}}),
                         doctest::Contains("tensor 'a': the name is given twice"), Error);
    CHECK_THROWS_WITH_AS(write_safetensors(p, {{"a", "F12", {2}, x}}),
                         doctest::Contains("unknown dtype \"F12\"; supported: F32"), Error);
    CHECK_THROWS_WITH_AS(write_safetensors(p, {{"a", "F32", {-2}, x}}), doctest::Contains("has a negative dimension"), Error);
    CHECK_THROWS_WITH_AS(write_safetensors(p, {{"__metadata__", "F32", {2}, x}}),
                         doctest::Contains("the name is reserved or empty"), Error);
    CHECK_THROWS_WITH_AS(write_safetensors(p, {{"a", "F32", {2}, nullptr}}), doctest::Contains("no data pointer for 8 bytes"), Error);
    CHECK_THROWS_WITH_AS(write_safetensors(p, {{"\xff", "F32", {2}, x}}), doctest::Contains("must be UTF-8"), Error);
    CHECK(dir.listing().empty());
  }

  TEST_CASE("golden batch, drafter and expected files read with the documented shapes and values") {
    CpuRuntime rt;
    const fs::path g = golden_dir();
    SafeTensors batch(g / "batch.safetensors");
    CHECK(batch.names() == std::vector<std::string>{"anchors", "input_ids", "keep", "loss_mask", "target_hidden"});
    CHECK(batch.info("input_ids").dtype == "I32");
    CHECK(batch.info("loss_mask").dtype == "U8");
    CHECK(batch.info("target_hidden").dtype == "F32");
    Tensor ids = batch.load("input_ids", DType::i32, Shape{2, 40});
    for (int32_t t : ids.to_ints()) CHECK((t >= 0 && t < 320));
    std::vector<int32_t> mask = batch.load("loss_mask", DType::u8, Shape{2, 40}).to_ints();
    for (int s = 0; s < 40; ++s) {
      CHECK(mask[size_t(s)] == (s <= 5 ? 0 : 1));          // sequence 0: positions 0-5 masked
      CHECK(mask[size_t(40 + s)] == (s >= 30 ? 0 : 1));    // sequence 1: positions 30-39 masked
    }
    CHECK(batch.load("keep", DType::u8, Shape{2, 5}).to_ints() == std::vector<int32_t>{1, 1, 1, 1, 1, 1, 1, 1, 0, 0});
    std::vector<int32_t> anchors = batch.load("anchors", DType::i32, Shape{2, 5}).to_ints();
    CHECK(std::find(anchors.begin() + 5, anchors.end(), 27) != anchors.end());
    Tensor hidden = batch.load("target_hidden", DType::f32, Shape{2, 40, 128});
    CHECK(max_abs(hidden.to_floats()) > 0);
    batch.check_all_finite();

    SafeTensors init(g / "drafter_init.safetensors");
    CHECK(init.info("fc.weight").shape == std::vector<int64_t>{64, 128});
    CHECK(init.info("layers.1.self_attn.k_norm.weight").shape == std::vector<int64_t>{16});
    CHECK(init.load("fc.weight", DType::f32, Shape{64, 128}).numel() == 64 * 128);

    nlohmann::json case_json = nlohmann::json::parse(read_file_text(g / "case.json"));
    SafeTensors expected(g / "expected.safetensors");
    std::vector<float> loss = expected.read_floats("loss");
    REQUIRE(loss.size() == 1);
    CHECK(std::fabs(double(loss[0]) - case_json["loss"].get<double>()) < 1e-6);
    CHECK(std::fabs(double(loss[0]) - 4.011123) < 1e-6);
    CHECK(expected.info("labels").dtype == "I32");
  }

  TEST_CASE("the golden BF16 target reads as finite, non-zero floats of the right shapes") {
    CpuRuntime rt;
    SafeTensors st(golden_dir() / "target-qwen3-bf16" / "model.safetensors");
    CHECK(st.metadata().at("format") == "pt");
    CHECK(st.names().size() == 3 + 4 * 11);
    CHECK(st.info("lm_head.weight").dtype == "BF16");
    CHECK(st.info("model.layers.0.mlp.down_proj.weight").shape == std::vector<int64_t>{64, 160});
    std::vector<float> w = st.read_floats("model.embed_tokens.weight");
    CHECK(w.size() == 320 * 64);
    for (float x : w) REQUIRE(std::isfinite(x));
    CHECK(max_abs(w) > 0);
    // bf16 -> f32 is exact, so the bits of each float's top half are the file's bf16 bits.
    std::vector<uint16_t> bits(w.size());
    std::memcpy(bits.data(), st.bytes("model.embed_tokens.weight"), bits.size() * 2);
    for (size_t i = 0; i < w.size(); i += 97) {
      uint32_t u;
      std::memcpy(&u, &w[i], 4);
      CHECK(uint16_t(u >> 16) == bits[i]);
      CHECK((u & 0xffffu) == 0);
    }
    Tensor t = st.load("model.norm.weight", DType::bf16, Shape{64});
    CHECK(t.dtype() == DType::bf16);
    CHECK(t.to_floats() == st.read_floats("model.norm.weight"));
    st.check_all_finite();
  }

  TEST_CASE("read_file_bytes and write_file_atomic: contents, errors and no damage on failure") {
    TempDir dir("st");
    fs::path p = dir / "f.bin";
    write_file_atomic(p, std::string("first version"));
    CHECK(read_raw(p) == "first version");
    std::vector<uint8_t> v = {1, 2, 3, 0, 255};
    write_file_atomic(p, v);
    CHECK(read_file_bytes(p) == v);
    write_file_atomic(p, std::string("kept"));
    CHECK(read_file_text(p) == "kept");

    // A writer that fails halfway leaves the old file as it was and no temp file.
    std::string msg = error_of([&] {
      write_file_atomic(p, [](const ByteSink& sink) {
        sink("half", 4);
        throw Error("disk quota simulation");
      });
    });
    CHECK(contains(msg, "writing '" + p.string() + "' failed: disk quota simulation"));
    CHECK(contains(msg, "is unchanged"));
    CHECK(read_raw(p) == "kept");
    CHECK(dir.listing() == std::vector<std::string>{"f.bin"});
    CHECK_THROWS_AS(write_file_atomic(p, [](const ByteSink& sink) {
                      sink("x", 1);
                      throw std::runtime_error("other");
                    }),
                    std::runtime_error);
    CHECK(read_raw(p) == "kept");
    CHECK(dir.listing() == std::vector<std::string>{"f.bin"});

    // OS failures: a missing directory, and a rename over a non-empty directory.
    msg = error_of([&] { write_file_atomic(dir / "no" / "such.bin", std::string("x")); });
    CHECK(contains(msg, (dir / "no" / "such.bin").string()));
    CHECK(contains(msg, "No such file or directory"));
    fs::create_directories(dir / "sub" / "inner");
    msg = error_of([&] { write_file_atomic(dir / "sub", std::string("x")); });
    CHECK(contains(msg, "cannot write '" + (dir / "sub").string() + "'"));
    CHECK(contains(msg, "rename: "));
    CHECK(fs::is_directory(dir / "sub" / "inner"));
    CHECK(dir.listing() == std::vector<std::string>{"f.bin", "sub"});

    msg = error_of([&] { read_file_bytes(dir / "missing.bin"); });
    CHECK(contains(msg, "cannot open '" + (dir / "missing.bin").string() + "': No such file or directory"));
    CHECK_THROWS_WITH_AS(read_file_bytes(dir / "sub"), doctest::Contains("it is a directory"), Error);
  }

  TEST_CASE("safetensors: U8 reads as ints 0..255; an aligned header gets no padding; a missing name lists six") {
    TempDir dir("safetensors-u8");
    std::vector<uint8_t> u = {0, 127, 128, 255};
    const auto p = dir / "u.safetensors";
    write_safetensors(p, {{"abcd", "U8", {4}, u.data()}});
    CHECK(SafeTensors(p).read_ints("abcd") == std::vector<int32_t>{0, 127, 128, 255});
    // This header is 56 bytes, a multiple of 8: the file is its length, it and the data, nothing between.
    const std::string header = R"({"abcd":{"dtype":"U8","shape":[4],"data_offsets":[0,4]}})";
    REQUIRE(header.size() == 56);
    const std::string bytes = read_raw(p);
    REQUIRE(bytes.size() == 8 + 56 + 4);
    CHECK(uint8_t(bytes[0]) == 56);
    CHECK(bytes.substr(8, 56) == header);
    CHECK(bytes.substr(64) == std::string("\x00\x7f\x80\xff", 4));

    std::vector<SafeTensorsEntry> eight;
    for (const char* n : {"h", "g", "f", "e", "d", "c", "b", "a"}) eight.push_back({n, "U8", {1}, u.data()});
    write_safetensors(dir / "eight.safetensors", eight);
    CHECK_ERROR(SafeTensors(dir / "eight.safetensors").info("zz"),
                "tensor 'zz': no such tensor; the file has 8 tensors ('a', 'b', 'c', 'd', 'e', 'f', ...)");
  }
}

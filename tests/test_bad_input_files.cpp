// Bad input in files: a safetensors header that does not begin with '{', and target
// weights holding tensors that config.json does not explain; what HF checkpoints legitimately
// carry (rotary inv_freq buffers, lm_head beside tied embeddings) still loads.
#include <fstream>

#include "runtime/checksum.h"
#include "tests/target_fixtures.h"

using namespace dflash;
using namespace dflash::test;

namespace {

std::string le64(uint64_t n) {
  std::string s(8, '\0');
  for (int i = 0; i < 8; ++i) s[size_t(i)] = char((n >> (8 * i)) & 0xff);
  return s;
}

// A safetensors file written with plain iostreams (independent of the writer under test):
// header length, header text, then `data`.
fs::path raw_safetensors(const TempDir& dir, const std::string& name, const std::string& header, const std::string& data) {
  fs::path p = dir / name;
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  const std::string bytes = le64(header.size()) + header + data;
  out.write(bytes.data(), std::streamsize(bytes.size()));
  REQUIRE(out.good());
  return p;
}

template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_SUITE("bad-input-files") {
  TEST_CASE("a safetensors header must begin with '{': a leading space is refused, trailing padding is not") {
    TempDir dir("st-brace");
    const std::string body = R"({"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}})";
    const std::string data(8, '\0');
    // The same header, valid JSON either way; only where the object starts differs.
    CHECK_NOTHROW(SafeTensors(raw_safetensors(dir, "padded.safetensors", body + "   ", data)));
    const fs::path lead = raw_safetensors(dir, "lead.safetensors", " " + body, data);
    const std::string msg = error_of([&] { SafeTensors st(lead); });
    INFO(msg);
    CHECK(msg.find("safetensors '" + lead.string() + "'") != std::string::npos);
    CHECK(msg.find("the header begins with byte 32 (' '), not '{'") != std::string::npos);
    CHECK(msg.find("fix:") != std::string::npos);
    const fs::path newline = raw_safetensors(dir, "newline.safetensors", "\n" + body, data);
    CHECK_ERROR(SafeTensors{newline}, "the header begins with byte 10 ('?'), not '{'");
  }

  TEST_CASE("a target whose weights hold layers beyond num_hidden_layers is refused, naming the tensors") {
    CpuRuntime rt;
    TempDir tmp("extra-layers");
    const fs::path dir = make_target(tmp, "t");
    // A 3-layer config over the weights of 3 layers plus a fourth: what an edited or mismatched
    // config.json looks like.
    edit_weights(dir, [](HostWeights& w) {
      w["model.layers.3.mlp.up_proj.weight"] = w.at("model.layers.2.mlp.up_proj.weight");
      w["model.layers.3.input_layernorm.weight"] = w.at("model.layers.2.input_layernorm.weight");
    });
    const std::string msg = error_of([&] { Target t(dir, {1}, 16); });
    INFO(msg);
    CHECK(msg.find("target '" + dir.string() + "'") != std::string::npos);
    CHECK(msg.find("2 tensors that config.json does not explain") != std::string::npos);
    CHECK(msg.find("num_hidden_layers = 3, but the weights hold layer 3") != std::string::npos);
    CHECK(msg.find("'model.layers.3.input_layernorm.weight' (in 'model.safetensors')") != std::string::npos);
    CHECK(msg.find("'model.layers.3.mlp.up_proj.weight'") != std::string::npos);
    CHECK(msg.find("fix:") != std::string::npos);

    // Any other unexplained tensor too (here q/k norms in a Llama checkpoint, which has none).
    const fs::path llama = make_target(tmp, "llama", "llama");
    edit_weights(llama, [](HostWeights& w) { w["model.layers.0.self_attn.q_norm.weight"] = {{8}, std::vector<float>(8, 1)}; });
    CHECK_ERROR(Target(llama, {1}, 16), "1 tensor that config.json does not explain: 'model.layers.0.self_attn.q_norm.weight'");
  }

  TEST_CASE("rotary inv_freq buffers and an lm_head beside tied embeddings are accepted") {
    CpuRuntime rt;
    TempDir tmp("legit-extras");
    const fs::path dir = make_target(tmp, "t");
    edit_weights(dir, [](HostWeights& w) {
      w["model.layers.0.self_attn.rotary_emb.inv_freq"] = {{4}, {1, 0.1f, 0.01f, 0.001f}};
      w["model.rotary_emb.inv_freq"] = {{4}, {1, 0.1f, 0.01f, 0.001f}};
    });
    CHECK_NOTHROW(Target(dir, {1}, 16));
    // Tied: lm_head.weight is then the embedding's duplicate, and the embedding is what is used.
    edit_config(dir, [](json& c) { c["tie_word_embeddings"] = true; });
    Target tied(dir, {1}, 16);
    CHECK(tied.lm_head().to_floats() == read_weights(dir / "model.safetensors").at("model.embed_tokens.weight").values);
  }

  TEST_CASE("target checksums change with the embedding or lm_head bytes, not with config.json") {
    CpuRuntime rt;
    TempDir tmp("target-sums");
    const fs::path dir = make_target(tmp, "t");
    const TargetSpec spec = read_target_spec(dir);
    const TargetChecksums a = target_checksums(dir, spec);
    // Independent: the CRC-32 of the tensor's bytes as read back from the file.
    const std::vector<float> embed = read_weights(dir / "model.safetensors").at("model.embed_tokens.weight").values;
    CHECK(a.embed_tokens == crc32_hex(crc32(embed.data(), embed.size() * sizeof(float))));
    edit_config(dir, [](json& c) { c["transformers_version"] = "4.51.0"; });
    CHECK(target_checksums(dir, read_target_spec(dir)).lm_head == a.lm_head);
    edit_weights(dir, [](HostWeights& w) { w.at("lm_head.weight").values[5] += 1e-3f; });
    const TargetChecksums b = target_checksums(dir, spec);
    CHECK(b.embed_tokens == a.embed_tokens);
    CHECK(b.lm_head != a.lm_head);
  }

  TEST_CASE("a shape whose element count overflows 64 bits is refused, not wrapped") {
    CHECK_ERROR(Shape({int64_t(1) << 62, 32}).numel(), "more than 2^63 elements");
    CHECK(Shape({int64_t(1) << 31, int64_t(1) << 31}).numel() == int64_t(1) << 62);
  }
}

// kernels/heuristics.h on the CPU (pure functions of the device and the shapes): which attention
// kernels, dk/dv and dq modes and TMA loads each rule chooses on an H100 and elsewhere, what a
// test's forcing may and may not reach, the lm_head + CE rows' cluster sizes, the target
// attention's rule, slot attention's key slices, every family on compute capabilities 8.0 to 12.0
// with and without the Hopper kernels built and with runtime.kernels = "portable", and the startup
// table's lines. The kernels themselves: the gpu-* suites.
#include <doctest/doctest.h>

#include <string>

#include "kernels/heuristics.h"
#include "train/kernel_choices.h"

using namespace dflash;
namespace heur = dflash::kernels::heuristics;

namespace {
const heur::Device kH100{9, 0, 132, true};  // a build with the Hopper kernels
const heur::Device kA100{8, 0, 108, true};
// The Qwen3-8B drafter's attention (heads 32/8, head_dim 128, blocks of 16) at a bucket.
heur::AttentionShape drafter(int64_t B, int64_t S, int64_t N, int64_t hd = 128, int64_t nh = 32, int64_t bs = 16) {
  return {B, S, N, bs, nh, 8, hd};
}
}  // namespace

TEST_SUITE("heuristics") {
  TEST_CASE("attention: the wgmma kernels on compute capability 9.0 for bf16 and head_dim <= 128, else mma.sync") {
    CHECK(heur::attention_forward(kH100, drafter(1, 4096, 512), true).sm90);
    CHECK(heur::attention_forward(kH100, drafter(1, 4096, 512, 64), true).sm90);
    CHECK_FALSE(heur::attention_forward(kH100, drafter(1, 4096, 512), false).sm90);        // f32
    CHECK_FALSE(heur::attention_forward(kH100, drafter(1, 4096, 512, 256), true).sm90);   // head_dim 256
    CHECK_FALSE(heur::attention_forward(kA100, drafter(1, 4096, 512), true).sm90);        // sm 8.0
    CHECK_FALSE(heur::attention_forward(heur::Device{9, 1, 132, true}, drafter(1, 4096, 512), true).sm90);
    CHECK_FALSE(heur::attention_forward(heur::Device{9, 0, 132, false}, drafter(1, 4096, 512), true).sm90);
    CHECK_FALSE(heur::attention_forward(heur::Device{}, drafter(1, 4096, 512), true).sm90);  // no GPU
    CHECK_FALSE(heur::attention_backward(kA100, drafter(1, 4096, 512), true, true).sm90);
    CHECK(std::string(heur::attention_forward(kA100, drafter(1, 4096, 512), true).why).find("9.0") !=
          std::string::npos);
    heur::AttentionForcing portable;
    portable.portable = true;
    CHECK_FALSE(heur::attention_forward(kH100, drafter(1, 4096, 512), true, portable).sm90);
    CHECK_FALSE(heur::attention_backward(kH100, drafter(1, 4096, 512), true, true, portable).sm90);
  }

  TEST_CASE("attention: key tiles by TMA at head_dim 64 and 128 only; dk/dv chunks where a chunk is one block") {
    CHECK(heur::attention_forward(kH100, drafter(1, 4096, 512), true).tma_key_tiles);
    CHECK(heur::attention_forward(kH100, drafter(2, 1024, 128, 64), true).tma_key_tiles);
    CHECK_FALSE(heur::attention_forward(kH100, drafter(1, 4096, 512, 96), true).tma_key_tiles);
    const heur::AttentionBackward b = heur::attention_backward(kH100, drafter(1, 4096, 512), true, true);
    CHECK(b.dkdv == heur::Dkdv::ws);
    CHECK(b.tma_chunks);
    CHECK(b.tma_key_tiles);
    CHECK_FALSE(heur::attention_backward(kH100, drafter(1, 4096, 512, 128, 16), true, true).tma_chunks);  // 32 rows
    CHECK_FALSE(heur::attention_backward(kH100, drafter(1, 4096, 512, 128, 64), true, true).tma_chunks);  // 128 rows
    CHECK_FALSE(heur::attention_backward(kH100, drafter(1, 4096, 512, 96), true, true).tma_chunks);
    // bs 4 with 16 heads a kv head: 64 rows a block, boxes of 4 slots x 16 heads (one kv head: a
    // grid of 8 sequences fills the GPU, so dk/dv runs ws).
    CHECK(heur::attention_backward(kH100, {8, 8192, 512, 4, 16, 1, 128}, true, true).tma_chunks);
    // Split has no producer warpgroup: no TMA.
    CHECK_FALSE(heur::attention_backward(kH100, drafter(1, 1024, 128), true, true).tma_chunks);
    heur::AttentionForcing threads;
    threads.no_tma = true;
    CHECK_FALSE(heur::attention_forward(kH100, drafter(1, 4096, 512), true, threads).tma_key_tiles);
    CHECK_FALSE(heur::attention_backward(kH100, drafter(1, 4096, 512), true, true, threads).tma_chunks);
  }

  TEST_CASE("attention: dk/dv split where 128-key context CTAs would not fill the GPU one and a half times") {
    // Context CTAs: B * nkv * ceil(S / 128); split when twice that is below 3 * SMs (396 on 132).
    CHECK(heur::attention_backward(kH100, drafter(1, 1024, 128), true, true).dkdv == heur::Dkdv::split);   // 64
    CHECK(heur::attention_backward(kH100, drafter(1, 2048, 256), true, true).dkdv == heur::Dkdv::split);   // 128
    CHECK(heur::attention_backward(kH100, drafter(1, 3072, 192), true, true).dkdv == heur::Dkdv::split);   // 192
    CHECK(heur::attention_backward(kH100, drafter(1, 3200, 200), true, true).dkdv == heur::Dkdv::ws);      // 200
    CHECK(heur::attention_backward(kH100, drafter(1, 4096, 512), true, true).dkdv == heur::Dkdv::ws);      // 256
    CHECK(heur::attention_backward(kH100, drafter(4, 1024, 128), true, true).dkdv == heur::Dkdv::ws);      // 256
    CHECK(heur::attention_backward(heur::Device{9, 0, 264, true}, drafter(1, 4096, 512), true, true).dkdv ==
          heur::Dkdv::split);  // twice the SMs
  }

  TEST_CASE("attention: dq fused into dk/dv's kernel at 4096:512 and longer, separate at 1024:128 with B = 4") {
    CHECK(heur::attention_backward(kH100, drafter(1, 4096, 512), true, true).dq == heur::Dq::fused);
    CHECK(heur::attention_backward(kH100, drafter(1, 16384, 1024), true, true).dq == heur::Dq::fused);
    CHECK(heur::attention_backward(kH100, drafter(4, 1024, 128), true, true).dq == heur::Dq::separate);  // 25 %
    CHECK(heur::attention_backward(kH100, drafter(1, 1024, 128), true, true).dq == heur::Dq::separate);  // split
    CHECK(heur::attention_backward(kH100, drafter(1, 4096, 512), true, false).dq == heur::Dq::separate);  // no dq
    CHECK(heur::attention_backward(kH100, drafter(1, 4096, 512, 64), true, true).dq == heur::Dq::separate);
    CHECK(heur::attention_backward(kH100, drafter(1, 4096, 512, 128, 32, 24), true, true).dq == heur::Dq::separate);
  }

  TEST_CASE("attention: forcing reaches a kept mode, never one whose shape requirements fail") {
    heur::AttentionForcing f;
    f.dq = heur::Dq::fused;
    CHECK(heur::attention_backward(kH100, drafter(4, 1024, 128), true, true, f).dq == heur::Dq::fused);
    CHECK(heur::attention_backward(kH100, drafter(1, 1024, 128), true, true, f).dq == heur::Dq::separate);  // split
    CHECK(heur::attention_backward(kH100, drafter(4, 1024, 128, 64), true, true, f).dq == heur::Dq::separate);
    CHECK(heur::attention_backward(kH100, drafter(4, 1024, 128, 128, 32, 24), true, true, f).dq ==
          heur::Dq::separate);
    CHECK(heur::attention_backward(kH100, drafter(4, 1024, 128), true, false, f).dq == heur::Dq::separate);
    f.dkdv = heur::Dkdv::ws;
    CHECK(heur::attention_backward(kH100, drafter(1, 1024, 128), true, true, f).dq == heur::Dq::fused);
    f.dkdv = heur::Dkdv::split;
    const heur::AttentionBackward split = heur::attention_backward(kH100, drafter(1, 4096, 512), true, true, f);
    CHECK(split.dkdv == heur::Dkdv::split);
    CHECK(split.dq == heur::Dq::separate);
    CHECK_FALSE(split.tma_chunks);
    f = {};
    f.dq = heur::Dq::separate;
    CHECK(heur::attention_backward(kH100, drafter(1, 4096, 512), true, true, f).dq == heur::Dq::separate);
  }

  TEST_CASE("lm_head + CE rows: the fewest CTAs a row whose slices fit 40 KiB, on compute capability 9.0") {
    CHECK(heur::ce_rows(kH100, 151936, true, true).cluster == 8);  // 37984 bytes a CTA
    CHECK(heur::ce_rows(kH100, 40000, true, true).cluster == 2);
    CHECK(heur::ce_rows(kH100, 16384, true, true).cluster == 1);
    CHECK(heur::ce_rows(kH100, 320, false, true).cluster == 0);         // f32 logits
    CHECK(heur::ce_rows(kH100, 320, true, false).cluster == 0);         // no dlogits: one read anyway
    CHECK(heur::ce_rows(kH100, 321, true, true).cluster == 0);          // not packs of 8
    CHECK(heur::ce_rows(kH100, 8 * 1000003, true, true).cluster == 0);  // no C keeps a slice in 40 KB
    CHECK(heur::ce_rows(kA100, 151936, true, true).cluster == 0);       // no clusters before 9.0
    CHECK(heur::ce_rows(kH100, 320, true, true, 80).cluster == 8);
    CHECK(heur::ce_rows(kH100, 120, true, true, 80).cluster == 3);
    CHECK(heur::ce_rows(kH100, 200, true, true, 80).cluster == 5);
    CHECK(heur::ce_rows(kH100, 151936, true, true, 98304).cluster == 4);
    CHECK(heur::ce_rows(kH100, 320, true, true, 0).cluster == 0);
  }

  TEST_CASE("slot attention: a key slice a 256 cache rows; small batches more slices, down to 32 rows each") {
    // Qwen3-8B's 8 kv heads on 132 SMs, a cache of 1024 positions: 4 slices by the keys.
    CHECK(heur::slot_attention_slices(32, 8, 1024, 132) == 4);   // 256 pairs: the grid fills the GPU
    CHECK(heur::slot_attention_slices(128, 8, 1024, 132) == 4);
    CHECK(heur::slot_attention_slices(1, 8, 1024, 132) == 32);   // 8 pairs: 33 would fill twice, 32 rows each
    CHECK(heur::slot_attention_slices(4, 8, 1024, 132) == 9);    // 32 pairs: ceil(264 / 32)
    CHECK(heur::slot_attention_slices(8, 8, 1024, 132) == 5);    // 64 pairs: ceil(264 / 64)
    CHECK(heur::slot_attention_slices(1, 8, 1024, 108) == 27);   // 108 SMs: ceil(216 / 8)
    CHECK(heur::slot_attention_slices(1, 8, 96, 132) == 3);      // a short cache: 32 rows a slice at least
    CHECK(heur::slot_attention_slices(1, 8, 16, 132) == 1);      // shorter than one slice's least
    CHECK(heur::slot_attention_slices(32, 8, 4096, 132) == 16);  // long caches: by the keys
    CHECK(heur::slot_attention_slices(32, 8, 65536, 132) == 32); // at most 32
    CHECK(heur::slot_attention_slices(0, 8, 1024, 132) == 32);   // no rows: as one pair
  }

  TEST_CASE("target attention: cuDNN for auto where the build has it; cudnn and own as named") {
    CHECK(heur::target_attention_cudnn("auto", true));
    CHECK_FALSE(heur::target_attention_cudnn("auto", false));
    CHECK(heur::target_attention_cudnn("cudnn", true));
    CHECK_FALSE(heur::target_attention_cudnn("own", true));
  }

  TEST_CASE("every family on compute capabilities 8.0 to 12.0: the Hopper kernels on 9.0 alone, where built, "
            "unless runtime.kernels = portable") {
    struct Gpu {
      int major, minor, sms;
    };
    // A100, A10 (8.6), L40S (8.9), H100, B200 (10.0), RTX PRO 6000 Blackwell (12.0).
    const Gpu gpus[] = {{8, 0, 108}, {8, 6, 72}, {8, 9, 142}, {9, 0, 132}, {10, 0, 148}, {12, 0, 188}};
    const heur::AttentionShape hot = drafter(1, 4096, 512);
    for (const Gpu& g : gpus)
      for (bool built : {false, true})
        for (bool portable : {false, true}) {
          const heur::Device d{g.major, g.minor, g.sms, built, portable};
          CAPTURE(g.major);
          CAPTURE(g.minor);
          CAPTURE(built);
          CAPTURE(portable);
          const bool hopper = g.major == 9 && g.minor == 0 && built && !portable;
          const std::string why = portable                          ? "runtime.kernels = \"portable\""
                                  : !(g.major == 9 && g.minor == 0) ? "not compute capability 9.0: the Hopper kernels "
                                                                      "are built and measured for 9.0 alone"
                                  : !built ? "this build has no Hopper kernels (DFLASH_CUDA_ARCHS without 90a)"
                                           : "";
          CHECK(d.sm90() == hopper);
          CHECK(std::string(d.sm90_unavailable() ? d.sm90_unavailable() : "") == why);
          // The drafter's attention: wgmma with TMA key tiles and dk/dv chunks, dq fused (4096:512); else mma.sync.
          const heur::AttentionForward fw = heur::attention_forward(d, hot, true);
          CHECK(fw.sm90 == hopper);
          CHECK(fw.tma_key_tiles == hopper);
          CHECK(std::string(fw.why) == (hopper ? "compute capability 9.0, bf16, head_dim <= 128" : why));
          const heur::AttentionBackward bw = heur::attention_backward(d, hot, true, true);
          CHECK(bw.sm90 == hopper);
          CHECK(bw.tma_chunks == hopper);
          CHECK(bw.tma_key_tiles == hopper);
          CHECK(bw.dq == (hopper ? heur::Dq::fused : heur::Dq::separate));
          // The mma.sync dq's 64-key tiles take 102 KB at head_dim 128: half as many keys on 99 KB GPUs.
          const int dq_keys = g.major == 8 && g.minor == 0 ? 64 : g.major == 9 || g.major == 10 ? 64 : 32;
          CHECK(bw.dq_keys == (hopper ? 0 : dq_keys));
          CHECK(heur::describe(bw) ==
                (hopper ? "dk/dv ws (chunks by TMA), dq fused into dk/dv's"
                        : "mma.sync kernels, dq " + std::to_string(dq_keys) + "-key tiles (" + why + ")"));
          // The lm_head + CE rows: read once by clusters of 8 CTAs on the Hopper path, else twice.
          const heur::CeRows ce = heur::ce_rows(d, 151936, true, true);
          CHECK(ce.cluster == (hopper ? 8 : 0));
          CHECK(std::string(ce.why) == (hopper ? "the fewest CTAs whose slices fit" : why));
          // The target's attention: cuDNN on every GPU where the build has it (its own rules per device).
          CHECK(heur::target_attention_cudnn("auto", true));
          CHECK_FALSE(heur::target_attention_cudnn("own", true));
          // The startup table's kernels line.
          const std::string asked = portable ? "runtime.kernels = \"portable\"" : "runtime.kernels = \"auto\"";
          CHECK(heur::describe(d) ==
                (hopper     ? asked + ": the Hopper kernels (wgmma, TMA, clusters) where the rules below choose them"
                 : portable ? asked + ": the portable kernels on any GPU"
                            : asked + ": the portable kernels (" + why + ")"));
        }
  }

  TEST_CASE("shared memory: the portable kernels' tiles fit each compute capability's, narrower where less") {
    const auto kb = [](int major, int minor) {
      return int(heur::smem_per_block(heur::Device{major, minor, 100}) / 1024);
    };
    CHECK(kb(8, 0) == 163);
    CHECK(kb(8, 6) == 99);
    CHECK(kb(8, 7) == 163);
    CHECK(kb(8, 9) == 99);
    CHECK(kb(9, 0) == 227);
    CHECK(kb(10, 0) == 227);
    CHECK(kb(12, 0) == 99);
    CHECK(kb(0, 0) == 99);  // unknown: the least
    // dq: a 64-row query tile and its dout plus double-buffered K and V tiles, rows of hd + 8 bf16.
    CHECK(heur::portable_dq_smem(128, true, 64) == size_t((2 * 64 + 4 * 64) * 136 * 2));  // 104448: over 99 KB
    CHECK(heur::portable_dq_smem(128, true, 32) == size_t((2 * 64 + 4 * 32) * 136 * 2));  // 69632
    CHECK(heur::portable_dq_smem(64, false, 64) == size_t(2 * (2 * 64 + 4 * 64) * 72 * 2));
    const heur::Device a100{8, 0, 108}, a10{8, 6, 72}, l40s{8, 9, 142}, h100{9, 0, 132}, b200{10, 0, 148},
        rtx{12, 0, 188};
    for (const heur::Device& d : {a100, h100, b200}) CHECK(heur::portable_dq_keys(d, 128, true) == 64);
    for (const heur::Device& d : {a10, l40s, rtx}) CHECK(heur::portable_dq_keys(d, 128, true) == 32);
    for (const heur::Device& d : {a100, a10, l40s, h100, b200, rtx}) CHECK(heur::portable_dq_keys(d, 64, true) == 64);
    CHECK(heur::portable_dq_keys(a100, 256, true) == 32);
    CHECK(heur::portable_dq_keys(a10, 256, true) == 16);   // 101376 bytes: 99 KB exactly
    CHECK(heur::portable_dq_keys(h100, 128, false) == 64);
    CHECK(heur::portable_dq_keys(a100, 128, false) == 32);
    CHECK(heur::portable_dq_keys(a10, 128, false) == 0);   // no tile: the launcher refuses
    CHECK(heur::portable_dq_keys(h100, 256, false) == 16);
    CHECK(heur::portable_dq_keys(a100, 256, false) == 0);  // 16 keys is the narrowest
    // The own causal kernel: (64 m + 256) rows of hd + 8 bf16; 2 m tiles up to head_dim 128.
    CHECK(heur::causal_tc_smem(128, 2) == size_t((128 + 256) * 136 * 2));
    for (const heur::Device& d : {a100, h100, b200}) CHECK(heur::causal_m_tiles(d, 128) == 2);
    for (const heur::Device& d : {a10, l40s, rtx}) CHECK(heur::causal_m_tiles(d, 128) == 1);
    for (const heur::Device& d : {a100, a10, l40s, h100, b200, rtx}) {
      CHECK(heur::causal_m_tiles(d, 64) == 2);
      CHECK(heur::causal_m_tiles(d, 40) == 2);
    }
    CHECK(heur::causal_m_tiles(h100, 256) == 1);
    CHECK(heur::causal_m_tiles(b200, 200) == 1);
    CHECK(heur::causal_m_tiles(a100, 256) == 0);  // 168960 bytes: the CUDA-core kernel
    CHECK(heur::causal_m_tiles(a10, 256) == 0);
  }

  TEST_CASE("the startup table's kernel lines name each family's choice per bucket; none on the CPU") {
    DrafterSpec d;
    d.num_attention_heads = 32, d.num_key_value_heads = 8, d.head_dim = 128, d.block_size = 16;
    d.vocab_size = 151936;
    const std::vector<Bucket> buckets = {{1024, 128, 1}, {4096, 512, 1}};
    const std::vector<std::string> h100 = kernel_choice_lines(kH100, d, buckets, "auto", true);
    REQUIRE(h100.size() == 7);
    CHECK(h100[0] == "device: compute capability 9.0, 132 SMs");
    CHECK(h100[1] == "kernels: runtime.kernels = \"auto\": the Hopper kernels (wgmma, TMA, clusters) where the rules "
                     "below choose them");
    CHECK(h100[2] ==
          "attention forward (heads 32/8, head_dim 128, block 16): sm90 wgmma, 128-key tiles, key tiles by TMA "
          "(compute capability 9.0, bf16, head_dim <= 128)");
    CHECK(h100[3] == "attention backward {seq 1024, anchors 128, batch 1}: dk/dv split, dq its own kernel");
    CHECK(h100[4] ==
          "attention backward {seq 4096, anchors 512, batch 1}: dk/dv ws (chunks by TMA), dq fused into dk/dv's");
    CHECK(h100[5] == "lm_head + cross-entropy (V 151936): rows read once, 8 CTA(s) a row (the fewest CTAs whose "
                     "slices fit)");
    CHECK(h100[6] == "target attention: cuDNN's fused flash attention (runtime.target_attention = \"auto\", the "
                     "build has cuDNN)");
    const std::vector<std::string> a100 = kernel_choice_lines(kA100, d, buckets, "own", true);
    CHECK(a100[1] == "kernels: runtime.kernels = \"auto\": the portable kernels (not compute capability 9.0: the "
                     "Hopper kernels are built and measured for 9.0 alone)");
    CHECK(a100[2].find("mma.sync kernels (not compute capability 9.0") != std::string::npos);
    CHECK(a100[5].find("rows read twice") != std::string::npos);
    CHECK(a100[6] == "target attention: dflash's own kernel (runtime.target_attention = \"own\")");
    CHECK(kernel_choice_lines(Device::cpu(), d, buckets, "auto").empty());
  }
}

// The kernels each op family runs, chosen in one place from the device's compute capability and
// the shapes (as FlashAttention-3's hopper/heuristics.h): one function per family, a one-line
// reason beside each rule. Plain C++ without CUDA: the launchers in kernels/cuda call these, and
// the trainer prints what they choose in its startup table (train/kernel_choices.cpp). Nothing
// here reads the environment; a choice a user makes is a config key (runtime.kernels,
// runtime.target_attention).
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace dflash::kernels::heuristics {

// Whether this build holds the Hopper kernels (kernels/cuda/*_sm90.cu, sm_90a machine code): CMake
// defines DFLASH_SM90_KERNELS for everything that links the CUDA kernels when DFLASH_CUDA_ARCHS
// lists 90a.
#ifdef DFLASH_SM90_KERNELS
inline constexpr bool kSm90KernelsBuilt = true;
#else
inline constexpr bool kSm90KernelsBuilt = false;
#endif

// The device a kernel runs on, and what the build and the config let the rules use there. 0.0 (no
// GPU, or the CPU backend) chooses the portable kernels.
struct Device {
  int major = 0, minor = 0;  // compute capability
  int sms = 0;               // streaming multiprocessors
  bool sm90_built = false;   // the build holds the Hopper kernels (kSm90KernelsBuilt)
  bool portable = false;     // runtime.kernels = "portable": the portable kernels on any device
  // Why the Hopper kernels (wgmma, TMA, thread-block clusters) do not run here; nullptr where they do.
  const char* sm90_unavailable() const {
    if (portable) return "runtime.kernels = \"portable\"";
    if (major != 9 || minor != 0)
      return "not compute capability 9.0: the Hopper kernels are built and measured for 9.0 alone";
    if (!sm90_built) return "this build has no Hopper kernels (DFLASH_CUDA_ARCHS without 90a)";
    return nullptr;
  }
  bool sm90() const { return sm90_unavailable() == nullptr; }
};

// The most dynamic shared memory a CTA may opt in to on d (the CUDA programming guide's table by
// compute capability): 227 KB on 9.0 and 10.x, 163 KB on 8.0 and 8.7, 99 KB on 8.6, 8.9 and 12.x,
// and on any other (the least of them). The portable kernels narrow their tiles to fit it.
inline size_t smem_per_block(const Device& d) {
  if (d.major == 9 || d.major == 10) return 227 * 1024;
  if (d.major == 8 && (d.minor == 0 || d.minor == 7)) return 163 * 1024;
  return 99 * 1024;
}

// ---- The drafter's DFlash block-sparse attention (kernels/cuda/dflash_attention*.cu) ----

struct AttentionShape {
  int64_t B, S, N, bs, nh, nkv, hd;  // as DflashAttentionDims
  int64_t group() const { return nkv > 0 ? nh / nkv : 0; }
  int64_t rows_per_kv() const { return group() * bs; }  // query rows of one block and kv head
};

enum class Dkdv { split, ws };    // dk/dv: 64 keys a CTA, chunks dealt to 2 warpgroups; 128 keys, a producer warpgroup
enum class Dq { separate, fused };  // dq: its own query-side kernel; summed inside dk/dv's kernel

// What a test may force where the rules choose otherwise (kernels/cuda/test_seams.h holds the
// process's; production code forces nothing). Forcing never reaches a variant whose shape
// requirements do not hold: fused dq still needs ws's dk/dv, head_dim in (64, 128] and bs | 128.
struct AttentionForcing {
  bool portable = false;    // the mma.sync kernels wherever a call leaves the choice to the rules
  std::optional<Dkdv> dkdv;
  std::optional<Dq> dq;
  bool no_tma = false;      // every producer stages its tiles by cp.async per row
};

struct AttentionForward {
  bool sm90 = false;           // the wgmma kernels (dflash_attention_forward_sm90.cu); else the mma.sync ones
  bool tma_key_tiles = false;  // sm90: context-only key tiles by TMA (the tensors must be 16-byte aligned too)
  const char* why = "";        // the rule that chose the kernels
};

// The forward (and the sm90 backward's query side, which shares its tiles and loads).
inline AttentionForward attention_forward(const Device& d, const AttentionShape& s, bool bf16,
                                          const AttentionForcing& f = {}) {
  AttentionForward c;
  if (f.portable) c.why = "forced (a test)";
  else if (const char* no = d.sm90_unavailable()) c.why = no;  // the wgmma kernels are Hopper kernels
  else if (!bf16) c.why = "f32 tensors: the wgmma kernels take bf16 operands";
  else if (s.hd > 128) c.why = "head_dim above 128: the wgmma kernels' tiles hold 128 columns";
  else c.sm90 = true, c.why = "compute capability 9.0, bf16, head_dim <= 128";
  // A TMA box is a 64-column swizzled slab: head_dim 64 or 128 fills whole slabs, so no column
  // past head_dim is loaded and every stride is a multiple of 16 bytes.
  c.tma_key_tiles = c.sm90 && !f.no_tma && (s.hd == 64 || s.hd == 128);
  return c;
}

// The sm90 forward's keys per tile: one mode, 128 (each wgmma m64n128, one softmax rescale per 128
// keys), which measured faster than 64 at the drafter's shapes on the H200 (docs/BENCH.md).
inline constexpr int kSm90ForwardKeys = 128;

struct AttentionBackward {
  bool sm90 = false;
  Dkdv dkdv = Dkdv::ws;
  Dq dq = Dq::separate;
  bool tma_chunks = false;     // dk/dv's producer loads each chunk of query rows by TMA
  bool tma_key_tiles = false;  // dq's own kernel loads its context-only key tiles by TMA
  int dq_keys = 0;             // not sm90: the mma.sync dq kernel's key tile (portable_dq_keys)
  const char* why = "";
};

// The mma.sync dq kernel's shared memory (kernels/cuda/dflash_attention_backward.cu): a 64-row
// query tile and its dout, and K and V tiles of `keys` rows, double-buffered; rows of hdp + 8 bf16
// (hdp: head_dim padded to 64, 128 or 256), f32 as two bf16 planes.
inline constexpr size_t portable_dq_smem(int hdp, bool bf16, int keys) {
  const size_t planes = bf16 ? 1 : 2;
  return 2 * size_t(hdp + 8) * (2 * planes * 64 + 4 * planes * size_t(keys));
}

// Its key tile: 64 keys (32 above head_dim 128 in bf16, 16 in f32: the tiles fitted to 9.0's
// shared memory) where they fit the device's; else half as many (head_dim 128 in bf16 on 8.6, 8.9
// and 12.x: 102 KB of their 99); 0 where neither fits (f32 above head_dim 64 on those, or above
// 128 on 8.0: the launcher refuses, naming the bytes).
inline int portable_dq_keys(const Device& d, int64_t hd, bool bf16) {
  const int hdp = hd <= 64 ? 64 : (hd <= 128 ? 128 : 256);
  const int keys = hdp <= 128 ? 64 : (bf16 ? 32 : 16);
  if (portable_dq_smem(hdp, bf16, keys) <= smem_per_block(d)) return keys;
  if (keys >= 32 && portable_dq_smem(hdp, bf16, keys / 2) <= smem_per_block(d)) return keys / 2;
  return 0;
}

// Whether the fused dq can run at all: dk/dv in the ws mode (its producer warpgroup's last warp
// writes dq), head_dim in (64, 128] (the warpgroups split 128 columns) and bs dividing 128 (a draft
// CTA's 128 keys are whole blocks, so the turns' order holds).
inline bool fused_dq_fits(const AttentionShape& s, Dkdv dkdv) {
  return dkdv == Dkdv::ws && s.hd > 64 && s.hd <= 128 && s.bs > 0 && 128 % s.bs == 0;
}

// wants_dq: dq is asked for (the fused mode sums it; without dq it never runs).
inline AttentionBackward attention_backward(const Device& d, const AttentionShape& s, bool bf16, bool wants_dq,
                                            const AttentionForcing& f = {}) {
  AttentionBackward c;
  const AttentionForward fw = attention_forward(d, s, bf16, f);
  c.sm90 = fw.sm90;
  c.why = fw.why;
  if (!c.sm90) {
    c.dq_keys = portable_dq_keys(d, s.hd, bf16);
    return c;
  }
  const int64_t sms = std::max(1, d.sms), cta_keys = 128, ctx_ctas = s.B * s.nkv * ((s.S + cta_keys - 1) / cta_keys);
  // Split where 128-key context CTAs, the first of which sees nearly every block, would not fill
  // the GPU one and a half times (1024:128 and 2048:256 with 8 kv heads on 132 SMs): 64 keys a CTA
  // halve the longest CTA. Otherwise ws: a producer warpgroup stages the chunks.
  c.dkdv = f.dkdv ? *f.dkdv : (2 * ctx_ctas < 3 * sms ? Dkdv::split : Dkdv::ws);
  if (wants_dq && fused_dq_fits(s, c.dkdv)) {
    // Fused only where the draft CTAs' phase (they run first, for the order of the sums) is short
    // against the context CTAs' work: at most 8 % of the longer of range 0's chunks (it sees nearly
    // every block) and the context chunks per SM, anchors taken as uniform. The drafter at 4096:512
    // and longer: about 6 % and less, its backward 12-15 % faster (docs/BENCH.md); 1024:128 with
    // B = 4: 25 %, separate.
    const int64_t rpk = s.rows_per_kv(), T = s.N * s.bs;
    const double range0 = double(s.N * rpk) / 64;
    const int64_t draft_ctas = s.B * s.nkv * ((T + cta_keys - 1) / cta_keys);
    const double draft_phase = double((draft_ctas + sms - 1) / sms) * double(cta_keys / s.bs * rpk) / 64;
    const double ctx_chunks = double(ctx_ctas) * range0 / 2;
    const bool fused = draft_phase <= 0.08 * std::max(range0, ctx_chunks / double(sms));
    c.dq = f.dq ? *f.dq : (fused ? Dq::fused : Dq::separate);
  }
  // A chunk of 64 rows by TMA is one block's rows (group x bs = 64) in boxes of {64 columns, bs,
  // group}: head_dim 64 or 128 fills whole slabs, bs % 4 keeps the lse box's 4 bs bytes a multiple
  // of 16; only a producer warpgroup (ws, fused) issues TMA.
  c.tma_chunks = c.dkdv == Dkdv::ws && !f.no_tma && s.rows_per_kv() == 64 && (s.hd == 64 || s.hd == 128) &&
                 s.bs % 4 == 0;
  c.tma_key_tiles = fw.tma_key_tiles;  // dq's own kernel stages key tiles as the forward does
  return c;
}

// ---- The lm_head + cross-entropy's training rows (kernels/cuda/linear_ce.cu) ----

// The most bytes of a row one CTA keeps in shared memory: five CTAs an SM (228 KB of shared
// memory, 48 registers a thread), the occupancy that keeps the row kernel bandwidth-bound.
inline constexpr size_t kCeSliceBytes = 40 * 1024;

struct CeRows {
  int cluster = 0;   // CTAs a row in the single-read kernel (each keeps V / cluster logits); 0: read twice
  const char* why = "";
};

// writes_dlogits: training (the rows also write the unit-upstream dlogits). The launcher also
// needs 16-byte aligned logits and dlogits.
inline CeRows ce_rows(const Device& d, int64_t V, bool bf16, bool writes_dlogits,
                      size_t slice_bytes = kCeSliceBytes) {
  // The single-read kernel is a Hopper kernel: thread-block clusters exist from 9.0 on, but its slice
  // budget is sized by 9.0's shared memory (a 12.0 SM has less than half) and measured there alone.
  if (const char* no = d.sm90_unavailable()) return {0, no};
  // Reading the logits once pays where they are written back (the dlogits of training).
  if (!writes_dlogits) return {0, "no dlogits: the rows are read once anyway"};
  // bf16 packs of 8: a row splits into whole 16-byte packs per CTA.
  if (!bf16 || V % 8 != 0) return {0, "f32 logits or V not a multiple of 8"};
  // The fewest CTAs whose slices fit the budget: fewer, larger clusters synchronise less.
  for (int C = 1; C <= 8; ++C)
    if (V % (8 * C) == 0 && size_t(V / C) * 2 <= slice_bytes) return {C, "the fewest CTAs whose slices fit"};
  return {0, "no cluster of up to 8 CTAs holds a row in the slice budget"};
}

// ---- The frozen target's causal attention (runtime/target_attention.h) ----

// asked: runtime.target_attention, "auto", "cudnn" or "own" (validated by the config). cuDNN's fused
// flash attention where the build has it: faster than dflash's kernel on the H100 and H200 at the
// target's shapes (docs/BENCH.md); a shape cuDNN cannot plan falls back to dflash's, with a note.
inline bool target_attention_cudnn(const std::string& asked, bool cudnn_built) {
  if (asked == "cudnn") return true;
  if (asked == "own") return false;
  return cudnn_built;
}

// The shared memory of dflash's own causal kernel on tensor cores (kernels/cuda/causal_attention.cu,
// bf16 at 16-byte aligned addresses): CTAs of 4 warps, 16 query rows per m tile each, and 64-key
// tiles of K and V, double-buffered; rows of hdp + 8 bf16 (hdp: head_dim padded to 32, 64, 128, 256).
inline constexpr size_t causal_tc_smem(int hdp, int m_tiles) {
  return size_t(4 * 16 * m_tiles + 4 * 64) * size_t(hdp + 8) * 2;
}

// Its m tiles a warp: 2 up to head_dim 128 (twice the MMAs per K and V fragment read), 1 above,
// where they fit the device's shared memory; else 1 (head_dim 128 on 8.6, 8.9 and 12.x: 102 KB of
// their 99); 0 where no tile fits (head_dim above 128 off 9.0 and 10.x): the CUDA-core kernel runs.
inline int causal_m_tiles(const Device& d, int64_t hd) {
  const int hdp = hd <= 32 ? 32 : (hd <= 64 ? 64 : (hd <= 128 ? 128 : 256));
  for (int mt = hdp <= 128 ? 2 : 1; mt >= 1; --mt)
    if (causal_tc_smem(hdp, mt) <= smem_per_block(d)) return mt;
  return 0;
}

// ---- Batched decoding's slot attention (kernels/cuda/slot_attention.cu) ----

// The key slices a (row, kv head) pair's keys split over (flash-decoding): one a 256 cache rows, at
// most 32. A grid of pairs too small to fill the SMs twice over (small batches: one row has 8 pairs
// at Qwen3-8B's 8 kv heads) takes more, down to 32 cache rows a slice: the kernel's key blocks are 8
// keys or fewer, so each of a CTA's four warps still has a whole block (one 8-key block at head dims up
// to 128 and up to 4 query heads a warp, two 4-key blocks at head dim 256). The scratch and the launch
// both take this count.
inline constexpr int64_t kSlotKeysPerSlice = 256, kSlotMinKeysPerSlice = 32, kSlotMaxSlices = 32;
inline int slot_attention_slices(int64_t rows, int64_t nkv, int64_t C, int sms) {
  const int64_t pairs = std::max<int64_t>(rows * nkv, 1), by_keys = (C + kSlotKeysPerSlice - 1) / kSlotKeysPerSlice;
  const int64_t to_fill = (2 * int64_t(sms) + pairs - 1) / pairs, most = C / kSlotMinKeysPerSlice;
  return int(std::clamp<int64_t>(std::max(by_keys, std::min(to_fill, most)), 1, kSlotMaxSlices));
}

// ---- Lines of the startup table ----

// The kernels the device may run: the Hopper kernels or the portable ones, and why.
inline std::string describe(const Device& d) {
  const std::string asked = std::string("runtime.kernels = \"") + (d.portable ? "portable" : "auto") + "\"";
  if (const char* no = d.sm90_unavailable())
    return d.portable ? asked + ": the portable kernels on any GPU" : asked + ": the portable kernels (" + no + ")";
  return asked + ": the Hopper kernels (wgmma, TMA, clusters) where the rules below choose them";
}

inline const char* name(Dkdv m) { return m == Dkdv::split ? "split" : "ws"; }
inline const char* name(Dq m) { return m == Dq::separate ? "its own kernel" : "fused into dk/dv's"; }

inline std::string describe(const AttentionForward& c) {
  if (!c.sm90) return std::string("mma.sync kernels (") + c.why + ")";
  return std::string("sm90 wgmma, ") + std::to_string(kSm90ForwardKeys) + "-key tiles, key tiles by " +
         (c.tma_key_tiles ? "TMA" : "threads") + " (" + c.why + ")";
}
inline std::string describe(const AttentionBackward& c) {
  if (!c.sm90) {
    const std::string dq = c.dq_keys ? ", dq " + std::to_string(c.dq_keys) + "-key tiles"
                                              : ", dq: no key tile fits this GPU's shared memory";
    return std::string("mma.sync kernels") + dq + " (" + c.why + ")";
  }
  const char* loads = c.dkdv == Dkdv::split ? "" : c.tma_chunks ? " (chunks by TMA)" : " (chunks by threads)";
  return std::string("dk/dv ") + name(c.dkdv) + loads + ", dq " + name(c.dq);
}
inline std::string describe(const CeRows& c) {
  if (c.cluster == 0) return std::string("rows read twice, one CTA a row (") + c.why + ")";
  return "rows read once, " + std::to_string(c.cluster) + " CTA(s) a row (" + c.why + ")";
}

}  // namespace dflash::kernels::heuristics

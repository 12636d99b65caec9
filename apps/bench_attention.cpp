// dflash-bench attention: the DFlash attention kernels alone, version 1 (mma.sync, the portable
// kernels) against version 2 (wgmma, sm_90a) as kernels/heuristics.h configures it for the shape,
// on random bf16 q, k, v, dout and sorted random anchors (all kept) built on the host and copied to
// the GPU. Prints the heuristics' choices, checks v2 against v1 (forward output and lse; dq, dk, dv
// from the same out and lse) and that v2's backward gives the same bits twice, and reports the
// median forward and backward times (CUDA events) with TFLOP/s counted as the anchors count:
// forward 4 * hd * heads per visible (query, key) pair, backward 2.5x that.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/error.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/cuda/cuda_backend.h"
#endif

#include "apps/bench.h"

namespace dflash {

#ifndef DFLASH_CUDA
int bench_attention(const std::vector<AttentionBenchShape>&, int) {
  DF_FAIL("dflash-bench attention: this build has no CUDA backend");
}
#else
namespace {

namespace kc = kernels::cuda;
constexpr int64_t kBlock = 16;  // the drafter's block size

// xorshift64*: fast, seeded, good enough for test data.
struct Rng {
  uint64_t s;
  uint64_t next() {
    s ^= s >> 12, s ^= s << 25, s ^= s >> 27;
    return s * 2685821657736338717ull;
  }
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }  // [0, 1)
};

std::vector<uint16_t> random_bf16(size_t n, uint64_t seed) {
  Rng r{seed * 0x9E3779B97F4A7C15ull + 1};
  std::vector<uint16_t> v(n);
  for (auto& x : v) x = f32_to_bf16((r.uniform() * 2.0f - 1.0f) * 1.7320508f);  // mean 0, variance 1
  return v;
}

// N distinct anchors per sequence from [0, S - bs], sorted (Floyd's sampling).
std::vector<int32_t> sorted_anchors(int64_t B, int64_t N, int64_t S, uint64_t seed) {
  Rng r{seed * 0x9E3779B97F4A7C15ull + 7};
  const int64_t span = S - kBlock + 1;
  DF_CHECK(span >= N, "dflash-bench attention: --anchors=" << N << " needs seq >= anchors + " << kBlock - 1);
  std::vector<int32_t> all;
  for (int64_t b = 0; b < B; ++b) {
    std::vector<int32_t> pick;
    std::vector<char> used(size_t(span), 0);
    for (int64_t j = span - N; j < span; ++j) {
      const int64_t t = int64_t(r.next() % uint64_t(j + 1));
      const int64_t x = used[size_t(t)] ? j : t;
      used[size_t(x)] = 1;
      pick.push_back(int32_t(x));
    }
    std::sort(pick.begin(), pick.end());
    all.insert(all.end(), pick.begin(), pick.end());
  }
  return all;
}

// A device allocation freed at scope exit.
struct DeviceBuffer {
  void* p = nullptr;
  size_t bytes = 0;
  explicit DeviceBuffer(size_t n) : bytes(n) { p = cuda_backend::alloc(0, n); }
  ~DeviceBuffer() { cuda_backend::free(0, p); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

std::vector<float> to_floats_bf16(const DeviceBuffer& d) {
  std::vector<uint16_t> h(d.bytes / 2);
  cuda_backend::memcpy_sync(h.data(), d.p, d.bytes);
  std::vector<float> f(h.size());
  for (size_t i = 0; i < h.size(); ++i) f[i] = bf16_to_f32(h[i]);
  return f;
}
std::vector<float> to_floats_f32(const DeviceBuffer& d) {
  std::vector<float> f(d.bytes / 4);
  cuda_backend::memcpy_sync(f.data(), d.p, d.bytes);
  return f;
}
std::vector<uint8_t> to_bytes(const DeviceBuffer& d) {
  std::vector<uint8_t> h(d.bytes);
  cuda_backend::memcpy_sync(h.data(), d.p, d.bytes);
  return h;
}

// max |a - b| / max |b| (NaN anywhere: NaN).
double rel_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, m = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) || std::isnan(b[i])) return NAN;
    d = std::max(d, double(std::fabs(a[i] - b[i])));
    m = std::max(m, double(std::fabs(b[i])));
  }
  return m > 0 ? d / m : d;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0.0 : v[v.size() / 2];
}

struct Timing {
  double fwd_ms, bwd_ms;
};

int run_shape(const AttentionBenchShape& s, int reps, void* stream) {
  const int64_t B = s.batch, S = s.seq, N = s.anchors, nh = s.heads, nkv = s.kv_heads, hd = s.head_dim;
  DF_CHECK(nh % nkv == 0, "dflash-bench attention: --heads must be a multiple of --kv-heads");
  const int64_t T = N * kBlock, keys = S + T;
  const size_t nq = size_t(B * T * nh * hd), nk = size_t(B * keys * nkv * hd), nl = size_t(B * nh * T);
  const std::vector<int32_t> anchors = sorted_anchors(B, N, S, uint64_t(S * 131 + N));
  const std::vector<int32_t> keep(size_t(B * N), 1);
  double flops = 0;  // forward, counted as the anchors count
  for (int32_t a : anchors) flops += 4.0 * double(hd) * double(nh) * double(kBlock) * double(a + kBlock);

  DeviceBuffer q(nq * 2), k(nk * 2), v(nk * 2), dout(nq * 2), out1(nq * 2), out2(nq * 2), lse1(nl * 4), lse2(nl * 4),
      delta(nl * 4), dq(nq * 2), dk(nk * 2), dv(nk * 2), d_anchors(anchors.size() * 4), d_keep(keep.size() * 4),
      tiles(4);
  {
    const auto hq = random_bf16(nq, 1), hk = random_bf16(nk, 2), hv = random_bf16(nk, 3), hdo = random_bf16(nq, 4);
    cuda_backend::memcpy_sync(q.p, hq.data(), q.bytes);
    cuda_backend::memcpy_sync(k.p, hk.data(), k.bytes);
    cuda_backend::memcpy_sync(v.p, hv.data(), v.bytes);
    cuda_backend::memcpy_sync(dout.p, hdo.data(), dout.bytes);
    cuda_backend::memcpy_sync(d_anchors.p, anchors.data(), d_anchors.bytes);
    cuda_backend::memcpy_sync(d_keep.p, keep.data(), d_keep.bytes);
  }
  const kc::DflashAttentionDims dims{B, S, N, kBlock, nh, nkv, hd, 64, float(1.0 / std::sqrt(double(hd)))};
  const kernels::heuristics::AttentionForward fwd_choice = kc::dflash_attention_forward_choice(dims, true);
  const kernels::heuristics::AttentionBackward bwd_choice = kc::dflash_attention_backward_choice(dims, true, true);
  const int64_t scratch_bytes = kc::dflash_attention_backward_scratch_bytes(dims, true, true);
  DeviceBuffer scratch(size_t(std::max<int64_t>(scratch_bytes, 16)));
  auto forward = [&](int version, DeviceBuffer& out, DeviceBuffer& lse) {
    kc::DflashAttentionForward a{q.p,   k.p,    v.p,     true,
                                 static_cast<const int32_t*>(d_anchors.p), static_cast<const int32_t*>(d_keep.p),
                                 dims,  out.p, static_cast<float*>(lse.p), static_cast<int32_t*>(tiles.p)};
    a.version = version;
    kc::dflash_attention_forward(a, stream);
  };
  // Backward from the given forward's out and lse; gradients accumulate into dq, dk, dv.
  auto backward = [&](int version, DeviceBuffer& out, DeviceBuffer& lse) {
    kc::DflashAttentionBackward a{q.p,  k.p,  v.p,  true, static_cast<const int32_t*>(d_anchors.p),
                                  static_cast<const int32_t*>(d_keep.p), dims, out.p, dout.p, true,
                                  static_cast<const float*>(lse.p), static_cast<float*>(delta.p), dq.p, true, dk.p,
                                  true, dv.p, true};
    a.version = version;
    a.scratch = scratch_bytes > 0 ? scratch.p : nullptr;
    kc::dflash_attention_backward(a, stream);
  };
  auto zero_grads = [&] {
    for (DeviceBuffer* d : {&dq, &dk, &dv}) cuda_backend::memset_async(d->p, 0, d->bytes, stream);
  };

  // Correctness: v2 against v1, both backwards from v1's out and lse.
  forward(1, out1, lse1);
  forward(0, out2, lse2);
  cuda_backend::synchronize(stream);
  const double d_out = rel_diff(to_floats_bf16(out2), to_floats_bf16(out1));
  const double d_lse = rel_diff(to_floats_f32(lse2), to_floats_f32(lse1));
  zero_grads();
  backward(1, out1, lse1);
  cuda_backend::synchronize(stream);
  const auto g1q = to_floats_bf16(dq), g1k = to_floats_bf16(dk), g1v = to_floats_bf16(dv);
  zero_grads();
  backward(0, out1, lse1);
  cuda_backend::synchronize(stream);
  const auto b2q = to_bytes(dq), b2k = to_bytes(dk), b2v = to_bytes(dv);
  const double d_dq = rel_diff(to_floats_bf16(dq), g1q), d_dk = rel_diff(to_floats_bf16(dk), g1k),
               d_dv = rel_diff(to_floats_bf16(dv), g1v);
  zero_grads();
  backward(0, out1, lse1);
  cuda_backend::synchronize(stream);
  const bool same_bits = to_bytes(dq) == b2q && to_bytes(dk) == b2k && to_bytes(dv) == b2v;

  // Timing: warm-up, then the median of reps event-timed calls per version (0: the heuristics').
  Timing t[2] = {};
  for (int i = 0; i < 2; ++i) {
    const int version = i == 0 ? 1 : 0;
    DeviceBuffer& out = i == 0 ? out1 : out2;
    DeviceBuffer& lse = i == 0 ? lse1 : lse2;
    for (int w = 0; w < 2; ++w) forward(version, out, lse), backward(version, out, lse);
    std::vector<double> f, b;
    for (int r = 0; r < reps; ++r) {
      f.push_back(cuda_backend::time_ms(stream, [&] { forward(version, out, lse); }));
      b.push_back(cuda_backend::time_ms(stream, [&] { backward(version, out, lse); }));
    }
    t[i] = {median(f), median(b)};
  }
  const double tf = flops * 1e-9, tb = 2.5 * flops * 1e-9;  // GFLOP per ms = TFLOP/s
  std::printf("\nshape: batch %lld, seq %lld, anchors %lld (bs %lld, %lld query rows), heads %lld, kv heads %lld, "
              "head dim %lld; forward %.1f GFLOP, backward %.1f GFLOP (counted)\n",
              (long long)B, (long long)S, (long long)N, (long long)kBlock, (long long)(B * T), (long long)nh,
              (long long)nkv, (long long)hd, flops * 1e-9, 2.5 * flops * 1e-9);
  std::printf("heuristics: forward %s; backward %s\n", kernels::heuristics::describe(fwd_choice).c_str(),
              kernels::heuristics::describe(bwd_choice).c_str());
  std::printf("v2 vs v1 (max |diff| / max |v1|): out %.2e, lse %.2e, dq %.2e, dk %.2e, dv %.2e; "
              "v2 backward twice: %s\n",
              d_out, d_lse, d_dq, d_dk, d_dv, same_bits ? "same bits" : "BITS DIFFER");
  std::printf("%-8s %12s %12s %12s %12s\n", "version", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s");
  for (int i = 0; i < 2; ++i)
    std::printf("v%-7d %12.3f %12.1f %12.3f %12.1f\n", i + 1, t[i].fwd_ms, tf / t[i].fwd_ms, t[i].bwd_ms,
                tb / t[i].bwd_ms);
  std::printf("v2 / v1 speed: forward %.2fx, backward %.2fx\n", t[0].fwd_ms / t[1].fwd_ms, t[0].bwd_ms / t[1].bwd_ms);
  std::printf("{\"bench\":\"attention\",\"seq\":%lld,\"anchors\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
              "\"head_dim\":%lld,\"v1_fwd_ms\":%.4f,\"v1_bwd_ms\":%.4f,\"v2_fwd_ms\":%.4f,\"v2_bwd_ms\":%.4f,"
              "\"sm90\":%s,\"dkdv\":\"%s\",\"dq\":\"%s\",\"fwd_tma\":%s,\"dkdv_tma\":%s,"
              "\"fused_scratch_bytes\":%lld,\"diff_out\":%.3e,\"diff_dq\":%.3e,\"diff_dk\":%.3e,\"diff_dv\":%.3e,"
              "\"deterministic\":%s}\n",
              (long long)S, (long long)N, (long long)nh, (long long)nkv, (long long)hd, t[0].fwd_ms, t[0].bwd_ms,
              t[1].fwd_ms, t[1].bwd_ms, bwd_choice.sm90 ? "true" : "false", kernels::heuristics::name(bwd_choice.dkdv),
              bwd_choice.dq == kernels::heuristics::Dq::fused ? "fused" : "separate",
              fwd_choice.tma_key_tiles ? "true" : "false", bwd_choice.tma_chunks ? "true" : "false",
              (long long)scratch_bytes, d_out, d_dq, d_dk, d_dv, same_bits ? "true" : "false");
  const bool ok = d_out <= 1e-2 && d_lse <= 1e-3 && d_dq <= 2e-2 && d_dk <= 2e-2 && d_dv <= 2e-2 && same_bits;
  if (!ok) std::printf("FAILED: v2 differs from v1 beyond bf16 rounding, or is not deterministic\n");
  return ok ? 0 : 1;
}

}  // namespace

int bench_attention(const std::vector<AttentionBenchShape>& shapes, int reps) {
  DF_CHECK(cuda_backend::device_count() > 0, "dflash-bench attention: no CUDA device visible");
  cuda_backend::set_device(0);
  std::printf("dflash attention kernels on %s: v1 = mma.sync, v2 = wgmma (sm_90a; other devices run v1 for both); "
              "median of %d calls after 2 warm-ups\n",
              cuda_backend::device_name(0), reps);
  void* stream = cuda_backend::create_stream(0);
  int rc = 0;
  for (const AttentionBenchShape& s : shapes) rc |= run_shape(s, reps, stream);
  cuda_backend::destroy_stream(stream);
  return rc;
}
#endif

}  // namespace dflash

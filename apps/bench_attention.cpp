// dflash-bench attention: the DFlash attention kernels alone, version 1 (mma.sync) against version 2
// (wgmma, sm_90a), on random bf16 q, k, v, dout and sorted random anchors (all kept) built on the
// host and copied to the GPU. Checks v2 against v1 (forward output and lse; dq, dk, dv from the
// same out and lse; dk, dv also with v2's dk/dv kernel forced into each mode), that v2's backward
// gives the same bits twice, and reports the median forward and backward times (CUDA events) with
// TFLOP/s counted as the anchors count: forward 4 * hd * heads per visible (query, key) pair,
// backward 2.5x that.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
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
  // The fused backward's scratch, sized as if forced on (dk/dv's ws mode), so every mode below can use it.
  setenv("DFLASH_ATTENTION_DKDV", "ws", 1);
  setenv("DFLASH_ATTENTION_DQ", "fused", 1);
  const int64_t scratch_bytes = kc::dflash_attention_backward_scratch_bytes(dims, true, true, 2);
  unsetenv("DFLASH_ATTENTION_DKDV");
  unsetenv("DFLASH_ATTENTION_DQ");
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
  forward(2, out2, lse2);
  cuda_backend::synchronize(stream);
  const double d_out = rel_diff(to_floats_bf16(out2), to_floats_bf16(out1));
  const double d_lse = rel_diff(to_floats_f32(lse2), to_floats_f32(lse1));
  zero_grads();
  backward(1, out1, lse1);
  cuda_backend::synchronize(stream);
  const auto g1q = to_floats_bf16(dq), g1k = to_floats_bf16(dk), g1v = to_floats_bf16(dv);
  zero_grads();
  backward(2, out1, lse1);
  cuda_backend::synchronize(stream);
  const auto b2q = to_bytes(dq), b2k = to_bytes(dk), b2v = to_bytes(dv);
  const double d_dq = rel_diff(to_floats_bf16(dq), g1q), d_dk = rel_diff(to_floats_bf16(dk), g1k),
               d_dv = rel_diff(to_floats_bf16(dv), g1v);
  zero_grads();
  backward(2, out1, lse1);
  cuda_backend::synchronize(stream);
  const bool same_bits = to_bytes(dq) == b2q && to_bytes(dk) == b2k && to_bytes(dv) == b2v;
  // v2's dk/dv kernel in each of its modes, forced (DFLASH_ATTENTION_DKDV), against v1.
  // Decoupled and ws compute every product as shared does: the same bits.
  const char* modes[4] = {"shared", "split", "decoupled", "ws"};
  double d_mode[4] = {0, 0, 0, 0};
  std::vector<uint8_t> shared_dk, shared_dv;
  bool decoupled_same = false, ws_dkdv_same = false;
  setenv("DFLASH_ATTENTION_DQ", "separate", 1);  // dq's own kernel for the dk/dv and query-side modes
  for (int m = 0; m < 4; ++m) {
    setenv("DFLASH_ATTENTION_DKDV", modes[m], 1);
    zero_grads();
    backward(2, out1, lse1);
    cuda_backend::synchronize(stream);
    d_mode[m] = std::max(rel_diff(to_floats_bf16(dk), g1k), rel_diff(to_floats_bf16(dv), g1v));
    if (m == 0) shared_dk = to_bytes(dk), shared_dv = to_bytes(dv);
    if (m == 2) decoupled_same = to_bytes(dk) == shared_dk && to_bytes(dv) == shared_dv;
    if (m == 3) ws_dkdv_same = to_bytes(dk) == shared_dk && to_bytes(dv) == shared_dv;
  }
  unsetenv("DFLASH_ATTENTION_DKDV");
  // v2's query-side kernels (forward, dq) in each mode, forced (DFLASH_ATTENTION_QUERY): ws runs
  // lockstep's products in lockstep's order, so out, lse and dq must be lockstep's bits (with
  // lockstep's 64-key tiles; the wide ones are compared with v1 below).
  const auto v1_out = to_floats_bf16(out1);
  const char* qmodes[2] = {"lockstep", "ws"};
  std::vector<uint8_t> q_bits[2][3];
  setenv("DFLASH_ATTENTION_FORWARD_KEYS", "64", 1);
  for (int m = 0; m < 2; ++m) {
    setenv("DFLASH_ATTENTION_QUERY", qmodes[m], 1);
    forward(2, out2, lse2);
    zero_grads();
    backward(2, out1, lse1);
    cuda_backend::synchronize(stream);
    q_bits[m][0] = to_bytes(out2), q_bits[m][1] = to_bytes(lse2), q_bits[m][2] = to_bytes(dq);
  }
  unsetenv("DFLASH_ATTENTION_QUERY");
  unsetenv("DFLASH_ATTENTION_FORWARD_KEYS");
  const bool ws_same = q_bits[1][0] == q_bits[0][0] && q_bits[1][1] == q_bits[0][1] && q_bits[1][2] == q_bits[0][2];
  unsetenv("DFLASH_ATTENTION_DQ");
  // dq in its own kernel or summed inside dk/dv's (DFLASH_ATTENTION_DQ, with dk/dv in the ws mode):
  // fused dq, dk, dv against v1, and the same bits twice (its sums' fixed order).
  const char* dqmodes[2] = {"separate", "fused"};
  std::vector<uint8_t> dq_bits[2][3];
  double d_dqmode[2] = {0, 0};
  setenv("DFLASH_ATTENTION_DKDV", "ws", 1);
  for (int m = 0; m < 2; ++m) {
    setenv("DFLASH_ATTENTION_DQ", dqmodes[m], 1);
    zero_grads();
    backward(2, out1, lse1);
    cuda_backend::synchronize(stream);
    dq_bits[m][0] = to_bytes(dq), dq_bits[m][1] = to_bytes(dk), dq_bits[m][2] = to_bytes(dv);
    d_dqmode[m] = rel_diff(to_floats_bf16(dq), g1q);
  }
  zero_grads();
  backward(2, out1, lse1);
  cuda_backend::synchronize(stream);
  // Fused dk, dv: ws's products over chunks in another order (other sums), so against v1 too.
  const double d_fused_dkdv = std::max(rel_diff(to_floats_bf16(dk), g1k), rel_diff(to_floats_bf16(dv), g1v));
  const bool fused_twice = to_bytes(dq) == dq_bits[1][0] && to_bytes(dk) == dq_bits[1][1] && to_bytes(dv) == dq_bits[1][2];
  unsetenv("DFLASH_ATTENTION_DKDV");
  unsetenv("DFLASH_ATTENTION_DQ");

  // Timing: warm-up, then the median of reps event-timed calls per version.
  Timing t[3] = {};
  for (int version : {1, 2}) {
    DeviceBuffer& out = version == 1 ? out1 : out2;
    DeviceBuffer& lse = version == 1 ? lse1 : lse2;
    for (int i = 0; i < 2; ++i) forward(version, out, lse), backward(version, out, lse);
    std::vector<double> f, b;
    for (int i = 0; i < reps; ++i) {
      f.push_back(cuda_backend::time_ms(stream, [&] { forward(version, out, lse); }));
      b.push_back(cuda_backend::time_ms(stream, [&] { backward(version, out, lse); }));
    }
    t[version] = {median(f), median(b)};
  }
  auto time_backward = [&] {  // v2's backward under the modes set now: one warm-up, the median of reps
    backward(2, out2, lse2);
    std::vector<double> b;
    for (int i = 0; i < reps; ++i) b.push_back(cuda_backend::time_ms(stream, [&] { backward(2, out2, lse2); }));
    return median(b);
  };
  double bwd_mode_ms[4] = {0, 0, 0, 0};
  setenv("DFLASH_ATTENTION_DQ", "separate", 1);
  for (int m = 0; m < 4; ++m) {
    setenv("DFLASH_ATTENTION_DKDV", modes[m], 1);
    bwd_mode_ms[m] = time_backward();
  }
  unsetenv("DFLASH_ATTENTION_DKDV");
  Timing tq[2] = {};
  setenv("DFLASH_ATTENTION_FORWARD_KEYS", "64", 1);
  for (int m = 0; m < 2; ++m) {
    setenv("DFLASH_ATTENTION_QUERY", qmodes[m], 1);
    forward(2, out2, lse2), backward(2, out2, lse2);
    std::vector<double> f, b;
    for (int i = 0; i < reps; ++i) {
      f.push_back(cuda_backend::time_ms(stream, [&] { forward(2, out2, lse2); }));
      b.push_back(cuda_backend::time_ms(stream, [&] { backward(2, out2, lse2); }));
    }
    tq[m] = {median(f), median(b)};
  }
  unsetenv("DFLASH_ATTENTION_QUERY");
  // The forward's ws mode over 64- and 128-key tiles (DFLASH_ATTENTION_FORWARD_KEYS), interleaved
  // per call so that clocks drift alike; the wide out against v1.
  const char* widths[2] = {"64", "128"};
  double fwd_keys_ms[2] = {0, 0};
  {
    std::vector<double> f[2];
    for (int i = 0; i < reps + 2; ++i)
      for (int m = 0; m < 2; ++m) {
        setenv("DFLASH_ATTENTION_FORWARD_KEYS", widths[m], 1);
        const double ms = cuda_backend::time_ms(stream, [&] { forward(2, out2, lse2); });
        if (i >= 2) f[m].push_back(ms);
      }
    fwd_keys_ms[0] = median(f[0]), fwd_keys_ms[1] = median(f[1]);
  }
  setenv("DFLASH_ATTENTION_FORWARD_KEYS", "128", 1);
  forward(2, out2, lse2);
  cuda_backend::synchronize(stream);
  const double d_wide_out = rel_diff(to_floats_bf16(out2), v1_out);
  unsetenv("DFLASH_ATTENTION_FORWARD_KEYS");
  unsetenv("DFLASH_ATTENTION_DQ");
  double bwd_dq_ms[2] = {0, 0};
  setenv("DFLASH_ATTENTION_DKDV", "ws", 1);
  for (int m = 0; m < 2; ++m) {
    setenv("DFLASH_ATTENTION_DQ", dqmodes[m], 1);
    bwd_dq_ms[m] = time_backward();
  }
  unsetenv("DFLASH_ATTENTION_DKDV");
  unsetenv("DFLASH_ATTENTION_DQ");
  // dk/dv's chunks by the producer threads' cp.async or by TMA (DFLASH_ATTENTION_DKDV_LOADS), in
  // the backward as it runs by default, interleaved per call so that clocks drift alike; the same bits.
  const char* loads[2] = {"threads", "tma"};
  double bwd_loads_ms[2] = {0, 0};
  bool loads_same = false;
  const bool loads_tma = kc::dflash_attention_dkdv_loads_by_tma(dims, true);
  {
    std::vector<double> b[2];
    for (int i = 0; i < reps + 2; ++i)
      for (int m = 0; m < 2; ++m) {
        setenv("DFLASH_ATTENTION_DKDV_LOADS", loads[m], 1);
        const double ms = cuda_backend::time_ms(stream, [&] { backward(2, out2, lse2); });
        if (i >= 2) b[m].push_back(ms);
      }
    bwd_loads_ms[0] = median(b[0]), bwd_loads_ms[1] = median(b[1]);
    std::vector<uint8_t> bits[2];
    for (int m = 0; m < 2; ++m) {
      setenv("DFLASH_ATTENTION_DKDV_LOADS", loads[m], 1);
      zero_grads();
      backward(2, out1, lse1);
      cuda_backend::synchronize(stream);
      for (DeviceBuffer* g : {&dq, &dk, &dv}) {
        const auto x = to_bytes(*g);
        bits[m].insert(bits[m].end(), x.begin(), x.end());
      }
    }
    loads_same = bits[0] == bits[1];
  }
  unsetenv("DFLASH_ATTENTION_DKDV_LOADS");
  // The forward's key tiles of context keys by threads or by TMA (DFLASH_ATTENTION_QUERY_LOADS), as
  // it runs by default, interleaved per call; the same bits of out and lse.
  double fwd_loads_ms[2] = {0, 0};
  bool fwd_loads_same = false;
  const bool fwd_loads_tma = kc::dflash_attention_query_loads_by_tma(dims, true);
  {
    std::vector<double> f[2];
    std::vector<uint8_t> bits[2];
    for (int i = 0; i < reps + 2; ++i)
      for (int m = 0; m < 2; ++m) {
        setenv("DFLASH_ATTENTION_QUERY_LOADS", loads[m], 1);
        const double ms = cuda_backend::time_ms(stream, [&] { forward(2, out2, lse2); });
        if (i >= 2) f[m].push_back(ms);
        if (i == 0) {
          cuda_backend::synchronize(stream);
          bits[m] = to_bytes(out2);
          const auto l = to_bytes(lse2);
          bits[m].insert(bits[m].end(), l.begin(), l.end());
        }
      }
    fwd_loads_ms[0] = median(f[0]), fwd_loads_ms[1] = median(f[1]);
    fwd_loads_same = bits[0] == bits[1];
  }
  unsetenv("DFLASH_ATTENTION_QUERY_LOADS");
  const double tf = flops * 1e-9, tb = 2.5 * flops * 1e-9;  // GFLOP per ms = TFLOP/s
  std::printf("\nshape: batch %lld, seq %lld, anchors %lld (bs %lld, %lld query rows), heads %lld, kv heads %lld, "
              "head dim %lld; forward %.1f GFLOP, backward %.1f GFLOP (counted)\n",
              (long long)B, (long long)S, (long long)N, (long long)kBlock, (long long)(B * T), (long long)nh,
              (long long)nkv, (long long)hd, flops * 1e-9, 2.5 * flops * 1e-9);
  std::printf("v2 vs v1 (max |diff| / max |v1|): out %.2e, lse %.2e, dq %.2e, dk %.2e, dv %.2e; "
              "v2 backward twice: %s\n",
              d_out, d_lse, d_dq, d_dk, d_dv, same_bits ? "same bits" : "BITS DIFFER");
  std::printf("%-8s %12s %12s %12s %12s\n", "version", "fwd ms", "fwd TFLOP/s", "bwd ms", "bwd TFLOP/s");
  for (int version : {1, 2})
    std::printf("v%-7d %12.3f %12.1f %12.3f %12.1f\n", version, t[version].fwd_ms, tf / t[version].fwd_ms,
                t[version].bwd_ms, tb / t[version].bwd_ms);
  for (int m = 0; m < 4; ++m) {
    const bool same = m == 2 ? decoupled_same : ws_dkdv_same;
    std::printf("v2 %-9s %9s %12s %12.3f %12.1f   (dk/dv forced %s; dk, dv vs v1 %.2e%s)\n", modes[m], "", "",
                bwd_mode_ms[m], tb / bwd_mode_ms[m], modes[m], d_mode[m],
                m < 2 ? "" : (same ? "; same bits as shared" : "; BITS DIFFER FROM SHARED"));
  }
  for (int m = 0; m < 2; ++m)
    std::printf("v2 %-9s %12.3f %12.1f %12.3f %12.1f   (forward and dq forced %s%s)\n", qmodes[m], tq[m].fwd_ms,
                tf / tq[m].fwd_ms, tq[m].bwd_ms, tb / tq[m].bwd_ms, qmodes[m],
                m == 1 ? (ws_same ? "; out, lse, dq: lockstep's bits" : "; BITS DIFFER FROM LOCKSTEP") : "");
  for (int m = 0; m < 2; ++m)
    std::printf("v2 dq %-6s %9s %12s %12.3f %12.1f   (dk/dv ws, dq %s; dq vs v1 %.2e%s)\n", dqmodes[m], "", "",
                bwd_dq_ms[m], tb / bwd_dq_ms[m], m == 0 ? "in its own kernel" : "summed in dk/dv's kernel",
                d_dqmode[m],
                m == 0 ? "" : fused_twice ? "; dq, dk, dv the same bits twice" : "; BITS DIFFER RUN TO RUN");
  std::printf("v2 dq fused: dk, dv vs v1 %.2e\n", d_fused_dkdv);
  for (int m = 0; m < 2; ++m)
    std::printf("v2 fwd %-3s keys %12.3f %12.1f   (the forward's ws mode over %s-key tiles%s)\n", widths[m],
                fwd_keys_ms[m], tf / fwd_keys_ms[m], widths[m], m == 0 ? "" : ", out vs v1 below");
  std::printf("v2 fwd 128 keys: out vs v1 %.2e\n", d_wide_out);
  for (int m = 0; m < 2; ++m)
    std::printf("v2 loads %-7s %9s %9s %12.3f %12.1f   (the default backward, dk/dv's chunks by %s%s)\n", loads[m], "",
                "", bwd_loads_ms[m], tb / bwd_loads_ms[m], m == 0 ? "cp.async per row" : "TMA",
                m == 0 ? "" : !loads_tma ? "; TMA does not apply here: both are the threads' path"
                              : loads_same ? "; same bits as threads" : "; BITS DIFFER FROM THREADS");
  for (int m = 0; m < 2; ++m)
    std::printf("v2 fwd loads %-7s %8.3f %12.1f   (the default forward, context key tiles by %s%s)\n", loads[m],
                fwd_loads_ms[m], tf / fwd_loads_ms[m], m == 0 ? "cp.async per row" : "TMA",
                m == 0 ? "" : !fwd_loads_tma ? "; TMA does not apply here: both are the threads' path"
                              : fwd_loads_same ? "; same bits as threads" : "; BITS DIFFER FROM THREADS");
  std::printf("v2 / v1 speed: forward %.2fx, backward %.2fx\n", t[1].fwd_ms / t[2].fwd_ms, t[1].bwd_ms / t[2].bwd_ms);
  std::printf("{\"bench\":\"attention\",\"seq\":%lld,\"anchors\":%lld,\"heads\":%lld,\"kv_heads\":%lld,"
              "\"head_dim\":%lld,\"v1_fwd_ms\":%.4f,\"v1_bwd_ms\":%.4f,\"v2_fwd_ms\":%.4f,\"v2_bwd_ms\":%.4f,"
              "\"v2_bwd_shared_ms\":%.4f,\"v2_bwd_split_ms\":%.4f,\"v2_bwd_decoupled_ms\":%.4f,\"v2_bwd_dkdv_ws_ms\":%.4f,"
              "\"v2_fwd_lockstep_ms\":%.4f,\"v2_fwd_ws_ms\":%.4f,\"v2_bwd_lockstep_ms\":%.4f,\"v2_bwd_ws_ms\":%.4f,"
              "\"ws_same_bits\":%s,\"v2_bwd_dq_separate_ms\":%.4f,\"v2_bwd_dq_fused_ms\":%.4f,"
              "\"fused_scratch_bytes\":%lld,\"fused_same_bits\":%s,\"v2_fwd_keys64_ms\":%.4f,\"v2_fwd_keys128_ms\":%.4f,"
              "\"v2_bwd_loads_threads_ms\":%.4f,\"v2_bwd_loads_tma_ms\":%.4f,\"loads_tma\":%s,\"loads_same_bits\":%s,"
              "\"v2_fwd_loads_threads_ms\":%.4f,\"v2_fwd_loads_tma_ms\":%.4f,\"fwd_loads_same_bits\":%s,"
              "\"diff_out\":%.3e,\"diff_dq\":%.3e,"
              "\"diff_dk\":%.3e,\"diff_dv\":%.3e,\"deterministic\":%s}\n",
              (long long)S, (long long)N, (long long)nh, (long long)nkv, (long long)hd, t[1].fwd_ms, t[1].bwd_ms,
              t[2].fwd_ms, t[2].bwd_ms, bwd_mode_ms[0], bwd_mode_ms[1], bwd_mode_ms[2], bwd_mode_ms[3], tq[0].fwd_ms, tq[1].fwd_ms,
              tq[0].bwd_ms, tq[1].bwd_ms, ws_same ? "true" : "false", bwd_dq_ms[0], bwd_dq_ms[1],
              (long long)scratch_bytes, fused_twice ? "true" : "false", fwd_keys_ms[0], fwd_keys_ms[1],
              bwd_loads_ms[0], bwd_loads_ms[1], loads_tma ? "true" : "false", loads_same ? "true" : "false", fwd_loads_ms[0],
              fwd_loads_ms[1], fwd_loads_same ? "true" : "false", d_out, d_dq,
              d_dk, d_dv,
              same_bits ? "true" : "false");
  const bool ok = d_out <= 1e-2 && d_lse <= 1e-3 && d_dq <= 2e-2 && d_dk <= 2e-2 && d_dv <= 2e-2 && same_bits &&
                  d_mode[0] <= 2e-2 && d_mode[1] <= 2e-2 && d_mode[2] <= 2e-2 && d_mode[3] <= 2e-2 && decoupled_same &&
                  ws_dkdv_same && ws_same && d_dqmode[0] <= 2e-2 && d_dqmode[1] <= 2e-2 && d_fused_dkdv <= 2e-2 &&
                  fused_twice && d_wide_out <= 1e-2 && loads_same && fwd_loads_same;
  if (!ok) std::printf("FAILED: v2 differs from v1 beyond bf16 rounding, is not deterministic, or a mode's bits differ\n");
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

// The vectorised CUDA memory-bound kernels (accumulate, fill, swiglu backward, concat backward,
// rope, rmsnorm backward) at the launcher level against their CPU definitions, on sizes that run
// the 8-element pack path, the scalar tail and several grid-stride rounds, with every f32/bf16
// combination of pointer dtypes and with unaligned pointers (odd element offsets: the scalar
// path). Plain IEEE elementwise math (accumulate, fill, concat backward) is checked bit for bit
// against a host computation; every elementwise kernel's pack path must equal its scalar path bit
// for bit; exp/sincos kernels and the rmsnorm reductions are within tolerance of the CPU kernels.
// rmsnorm runs at the drafter's per-token (D = 4096) and per-head (D = 128) shapes with 5000 rows;
// its forward's sum order is also replayed on the host, bit for bit.
// Suite "gpu-kernels": it needs a GPU and fails without one.
#ifdef DFLASH_CUDA
#include <cmath>
#include <cstring>

#include "kernels/cpu/cpu_kernels.h"
#include "kernels/cuda/cuda_kernels.h"
#include "runtime/ops.h"
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

// n values of dtype dt on the current (CUDA) context, `offset` elements into a larger buffer
// (offset 1: the pointer is not 16-byte aligned, so the kernels take their scalar path).
struct Buf {
  Tensor t;
  DType dt;
  int64_t offset, n;
  void* ptr() const { return static_cast<char*>(t.raw()) + offset * int64_t(dtype_size(dt)); }
  std::vector<float> read() const {
    std::vector<float> all = t.to_floats();
    return {all.begin() + offset, all.begin() + offset + n};
  }
};
Buf upload(const std::vector<float>& v, DType dt, int64_t offset) {
  std::vector<float> padded(size_t(offset), 0.0f);
  std::vector<float> r = round_to(dt, v);
  padded.insert(padded.end(), r.begin(), r.end());
  padded.push_back(0.0f);  // a guard element after the data, never touched
  return {make_float({int64_t(padded.size())}, padded, dt), dt, offset, int64_t(v.size())};
}

// The f32 value rounded to dt, as a kernel stores it (round to nearest even for bf16).
float stored(DType dt, float v) { return dt == DType::bf16 ? bf16_to_f32(f32_to_bf16(v)) : v; }

DType float_dtype(bool bf16) { return bf16 ? DType::bf16 : DType::f32; }
const char* name_of(bool bf16) { return bf16 ? "bf16" : "f32"; }

void* stream(Context& ctx) { return ctx.cuda_stream(); }

// Element counts: below one pack, one pack, a ragged tail, and enough packs for several rounds of
// the grid-stride loops on a 132-SM GPU (one wave is at most 132 * 2048 threads).
const std::vector<int64_t> kSizes = {1, 7, 8, 1003, 2500003};

}  // namespace

TEST_SUITE("gpu-kernels") {
  TEST_CASE("accumulate and fill: bit for bit like the host, every dtype pair, aligned and not") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    for (int64_t n : kSizes) {
      const std::vector<float> a32 = random_floats(size_t(n), uint64_t(n) + 1), b32 = random_floats(size_t(n), uint64_t(n) + 2);
      for (bool dst_bf16 : {false, true})
        for (bool src_bf16 : {false, true})
          for (auto [od, os] : {std::pair<int64_t, int64_t>{0, 0}, {1, 0}, {0, 1}, {3, 5}}) {
            INFO("n " << n << " dst " << name_of(dst_bf16) << "+" << od << " src " << name_of(src_bf16) << "+" << os);
            const DType dd = float_dtype(dst_bf16), ds = float_dtype(src_bf16);
            const std::vector<float> a = round_to(dd, a32), b = round_to(ds, b32);
            Buf dst = upload(a, dd, od), src = upload(b, ds, os);
            kernels::cuda::accumulate(dst.ptr(), dst_bf16, src.ptr(), src_bf16, n, stream(ctx));
            std::vector<float> got = dst.read(), want(static_cast<size_t>(n));
            for (size_t i = 0; i < want.size(); ++i) want[i] = stored(dd, a[i] + b[i]);
            CHECK(bitwise_equal(got, want));
            if (os == 0) {
              kernels::cuda::fill(dst.ptr(), dst_bf16, n, 1.7f, stream(ctx));
              CHECK(bitwise_equal(dst.read(), std::vector<float>(size_t(n), stored(dd, 1.7f))));
              CHECK(dst.t.to_floats().back() == 0.0f);  // the guard after the data is untouched
            }
          }
    }
  }

  TEST_CASE("swiglu backward into fresh gradients: overwrites garbage with the bits of a zero-filled accumulate") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    for (int64_t n : kSizes)
      for (bool bf : {false, true})
        for (int64_t off : {0, 1})
          for (int fresh : {1, 2, 3}) {  // dg fresh, du fresh, both
            INFO("n " << n << " dtype " << name_of(bf) << " offset " << off << " fresh " << fresh);
            const DType dt = float_dtype(bf);
            const std::vector<float> g = round_to(dt, random_floats(size_t(n), 21, 6.0f)),
                                     u = round_to(dt, random_floats(size_t(n), 22)),
                                     dy = round_to(dt, random_floats(size_t(n), 23)),
                                     acc = round_to(dt, random_floats(size_t(n), 24));
            const std::vector<float> zeros(size_t(n), 0.0f), nans(size_t(n), std::nanf(""));
            Buf bg = upload(g, dt, off), bu = upload(u, dt, off), bdy = upload(dy, dt, off);
            // Reference: the fresh one zero-filled, the other accumulating.
            Buf rdg = upload((fresh & 1) ? zeros : acc, dt, off), rdu = upload((fresh & 2) ? zeros : acc, dt, off);
            kernels::cuda::swiglu_backward(bg.ptr(), bu.ptr(), bf, bdy.ptr(), bf, rdg.ptr(), bf, rdu.ptr(), bf, n,
                                           stream(ctx));
            Buf fdg = upload((fresh & 1) ? nans : acc, dt, off), fdu = upload((fresh & 2) ? nans : acc, dt, off);
            kernels::cuda::swiglu_backward(bg.ptr(), bu.ptr(), bf, bdy.ptr(), bf, fdg.ptr(), bf, fdu.ptr(), bf, n,
                                           stream(ctx), (fresh & 1) != 0, (fresh & 2) != 0);
            CHECK(bitwise_equal(fdg.read(), rdg.read()));
            CHECK(bitwise_equal(fdu.read(), rdu.read()));
            std::vector<float> cdg = (fresh & 1) ? nans : acc, cdu = (fresh & 2) ? nans : acc;
            std::vector<float> zdg = (fresh & 1) ? zeros : acc, zdu = (fresh & 2) ? zeros : acc;
            if (!bf) {  // the CPU kernel: the same contract
              kernels::cpu::swiglu_backward(g.data(), u.data(), dy.data(), cdg.data(), cdu.data(), n, (fresh & 1) != 0,
                                            (fresh & 2) != 0);
              kernels::cpu::swiglu_backward(g.data(), u.data(), dy.data(), zdg.data(), zdu.data(), n);
              CHECK(bitwise_equal(cdg, zdg));
              CHECK(bitwise_equal(cdu, zdu));
            }
          }
  }

  TEST_CASE("swiglu backward over its own inputs (dg = g, du = u, fresh): the bits of separate buffers") {
    // How autograd runs it when nothing else holds gate and up (NodeGrads::in_overwritable(t, donor)).
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    for (int64_t n : kSizes)
      for (bool bf : {false, true})
        for (int64_t off : {0, 1}) {
          INFO("n " << n << " dtype " << name_of(bf) << " offset " << off);
          const DType dt = float_dtype(bf);
          const std::vector<float> g = round_to(dt, random_floats(size_t(n), 31, 6.0f)),
                                   u = round_to(dt, random_floats(size_t(n), 32)),
                                   dy = round_to(dt, random_floats(size_t(n), 33)), nans(size_t(n), std::nanf(""));
          Buf bg = upload(g, dt, off), bu = upload(u, dt, off), bdy = upload(dy, dt, off);
          Buf rdg = upload(nans, dt, off), rdu = upload(nans, dt, off);
          kernels::cuda::swiglu_backward(bg.ptr(), bu.ptr(), bf, bdy.ptr(), bf, rdg.ptr(), bf, rdu.ptr(), bf, n,
                                         stream(ctx), true, true);
          kernels::cuda::swiglu_backward(bg.ptr(), bu.ptr(), bf, bdy.ptr(), bf, bg.ptr(), bf, bu.ptr(), bf, n,
                                         stream(ctx), true, true);
          CHECK(bitwise_equal(bg.read(), rdg.read()));
          CHECK(bitwise_equal(bu.read(), rdu.read()));
          if (!bf) {  // the CPU kernel in place too
            std::vector<float> cg = g, cu = u, sdg(static_cast<size_t>(n)), sdu(static_cast<size_t>(n));
            kernels::cpu::swiglu_backward(g.data(), u.data(), dy.data(), sdg.data(), sdu.data(), n, true, true);
            kernels::cpu::swiglu_backward(cg.data(), cu.data(), dy.data(), cg.data(), cu.data(), n, true, true);
            CHECK(bitwise_equal(cg, sdg));
            CHECK(bitwise_equal(cu, sdu));
          }
        }
  }

  TEST_CASE("swiglu backward: pack path equals scalar path bit for bit and the CPU within tolerance") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    for (int64_t n : kSizes) {
      const std::vector<float> g32 = random_floats(size_t(n), 11, 6.0f), u32 = random_floats(size_t(n), 12),
                               dy32 = random_floats(size_t(n), 13), dg32 = random_floats(size_t(n), 14),
                               du32 = random_floats(size_t(n), 15);
      for (bool gu_bf16 : {false, true})
        for (bool dy_bf16 : {false, true})
          for (bool dg_bf16 : {false, true})
            for (int which : {0, 1, 2}) {  // both gradients, dg only, du only
              const bool du_bf16 = !dg_bf16;
              INFO("n " << n << " g,u " << name_of(gu_bf16) << " dy " << name_of(dy_bf16) << " dg " << name_of(dg_bf16)
                        << " du " << name_of(du_bf16) << " gradients " << which);
              const DType dgu = float_dtype(gu_bf16), ddy = float_dtype(dy_bf16);
              const std::vector<float> g = round_to(dgu, g32), u = round_to(dgu, u32), dy = round_to(ddy, dy32),
                                       dg0 = round_to(float_dtype(dg_bf16), dg32), du0 = round_to(float_dtype(du_bf16), du32);
              std::vector<std::vector<float>> results;
              for (int64_t off : {0, 1}) {
                Buf bg = upload(g, dgu, off), bu = upload(u, dgu, off), bdy = upload(dy, ddy, off);
                Buf bdg = upload(dg0, float_dtype(dg_bf16), off), bdu = upload(du0, float_dtype(du_bf16), off);
                kernels::cuda::swiglu_backward(bg.ptr(), bu.ptr(), gu_bf16, bdy.ptr(), dy_bf16,
                                               which == 2 ? nullptr : bdg.ptr(), dg_bf16,
                                               which == 1 ? nullptr : bdu.ptr(), du_bf16, n, stream(ctx));
                results.push_back(bdg.read());
                results.push_back(bdu.read());
              }
              CHECK(bitwise_equal(results[0], results[2]));  // dg: pack path == scalar path
              CHECK(bitwise_equal(results[1], results[3]));  // du
              if (which == 2) CHECK(bitwise_equal(results[0], dg0));
              if (which == 1) CHECK(bitwise_equal(results[1], du0));
              std::vector<float> dg = dg0, du = du0;
              kernels::cpu::swiglu_backward(g.data(), u.data(), dy.data(), which == 2 ? nullptr : dg.data(),
                                            which == 1 ? nullptr : du.data(), n);
              CHECK(rel_err(results[0], dg) <= (dg_bf16 ? 1e-2 : 1e-5));
              CHECK(rel_err(results[1], du) <= (du_bf16 ? 1e-2 : 1e-5));
            }
    }
  }

  TEST_CASE("concat backward: bit for bit like the host, packs, ragged widths and unaligned parts") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    struct Case {
      int64_t outer, A, B;
    };
    for (Case c : {Case{3, 8, 16}, Case{1000, 5, 3}, Case{2, 4096, 1024}, Case{4000, 640, 128}, Case{1, 0, 24}})
      for (bool dy_bf16 : {false, true})
        for (bool da_bf16 : {false, true})
          for (int64_t off : {0, 1})
            for (int which : {0, 1, 2}) {  // both parts, da only, db only
              const bool db_bf16 = !da_bf16;
              INFO("outer " << c.outer << " A " << c.A << " B " << c.B << " dy " << name_of(dy_bf16) << " da "
                            << name_of(da_bf16) << " offset " << off << " parts " << which);
              const int64_t W = c.A + c.B;
              const std::vector<float> dy = round_to(float_dtype(dy_bf16), random_floats(size_t(c.outer * W), 21)),
                                       a0 = round_to(float_dtype(da_bf16), random_floats(size_t(c.outer * c.A), 22)),
                                       b0 = round_to(float_dtype(db_bf16), random_floats(size_t(c.outer * c.B), 23));
              Buf bdy = upload(dy, float_dtype(dy_bf16), off), ba = upload(a0, float_dtype(da_bf16), off),
                  bb = upload(b0, float_dtype(db_bf16), 0);
              kernels::cuda::concat_backward(bdy.ptr(), dy_bf16, which == 2 ? nullptr : ba.ptr(), da_bf16,
                                             which == 1 ? nullptr : bb.ptr(), db_bf16, c.outer, c.A, c.B, stream(ctx));
              std::vector<float> wa = a0, wb = b0;
              for (int64_t o = 0; o < c.outer; ++o) {
                if (which != 2)
                  for (int64_t k = 0; k < c.A; ++k)
                    wa[size_t(o * c.A + k)] = stored(float_dtype(da_bf16), a0[size_t(o * c.A + k)] + dy[size_t(o * W + k)]);
                if (which != 1)
                  for (int64_t k = 0; k < c.B; ++k)
                    wb[size_t(o * c.B + k)] =
                        stored(float_dtype(db_bf16), b0[size_t(o * c.B + k)] + dy[size_t(o * W + c.A + k)]);
              }
              CHECK(bitwise_equal(ba.read(), wa));
              CHECK(bitwise_equal(bb.read(), wb));
            }
  }

  TEST_CASE("rope forward and backward: pack path equals scalar path bit for bit and the CPU within tolerance") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    struct Case {
      int64_t rows, heads, hd;
    };
    for (Case c : {Case{257, 3, 128}, Case{33, 32, 128}, Case{1, 1, 16}, Case{9, 2, 8}, Case{2048, 8, 64}})
      for (bool x_bf16 : {false, true})
        for (bool y_bf16 : {false, true})
          for (bool inverse : {false, true})
          for (bool fresh : {false, true}) {  // backward into a fresh dx: NaN bytes that must never be read
            if (!inverse && x_bf16 != y_bf16) continue;  // the forward takes one dtype
            if (fresh && !inverse) continue;
            INFO("rows " << c.rows << " heads " << c.heads << " hd " << c.hd << " x " << name_of(x_bf16) << " y "
                         << name_of(y_bf16) << (inverse ? " backward" : " forward") << (fresh ? " fresh" : ""));
            const int64_t n = c.rows * c.heads * c.hd;
            std::vector<int32_t> pos(size_t(c.rows));
            for (size_t r = 0; r < pos.size(); ++r) pos[r] = int32_t((r * 7919) % 65536);
            std::vector<float> freq(size_t(c.hd / 2));
            for (int64_t i = 0; i < c.hd / 2; ++i) freq[size_t(i)] = 1.0f / std::pow(1e6f, float(2 * i) / float(c.hd));
            const std::vector<float> x = round_to(float_dtype(x_bf16), random_floats(size_t(n), 31)),
                                     y_init = fresh ? std::vector<float>(size_t(n), std::nanf(""))
                                                    : round_to(float_dtype(y_bf16), random_floats(size_t(n), 32));
            Tensor tpos = Tensor::from_ints({c.rows}, pos), tfreq = Tensor::from_floats({c.hd / 2}, freq);
            std::vector<std::vector<float>> results;
            for (int64_t off : {0, 1}) {
              Buf bx = upload(x, float_dtype(x_bf16), off), by = upload(y_init, float_dtype(y_bf16), off);
              if (inverse)
                kernels::cuda::rope_backward(bx.ptr(), x_bf16, tpos.data<int32_t>(), tfreq.data<float>(), by.ptr(),
                                             y_bf16, c.rows, c.heads, c.hd, stream(ctx), fresh);
              else
                kernels::cuda::rope_forward(bx.ptr(), tpos.data<int32_t>(), tfreq.data<float>(), by.ptr(), x_bf16,
                                            c.rows, c.heads, c.hd, stream(ctx));
              results.push_back(by.read());
            }
            CHECK(bitwise_equal(results[0], results[1]));
            std::vector<float> want = y_init;
            if (inverse)
              kernels::cpu::rope_backward(x.data(), pos.data(), freq.data(), want.data(), c.rows, c.heads, c.hd, fresh);
            else
              kernels::cpu::rope_forward(x.data(), pos.data(), freq.data(), want.data(), c.rows, c.heads, c.hd);
            CHECK(rel_err(results[0], want) <= (y_bf16 ? 1e-2 : 1e-5));
          }
  }

  TEST_CASE("rmsnorm backward: per-token (D 4096) and per-head (D 128) shapes with 5000 rows, and odd ones") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    struct Case {
      int64_t rows, D, offset;
    };
    // D 4096: the block layout (2 packs a thread); 128 and 40: lane segments; 6144: 4 packs a
    // thread; 1000: the block layout with idle threads; 7 and offset 1: the scalar fallback.
    for (Case c : {Case{5000, 4096, 0}, Case{5000, 128, 0}, Case{130, 40, 0}, Case{3, 8, 0}, Case{77, 6144, 0},
                   Case{2, 1000, 0}, Case{33, 7, 0}, Case{300, 128, 1}}) {
      const int64_t n = c.rows * c.D;
      const std::vector<float> x32 = random_floats(size_t(n), 41), dy32 = random_floats(size_t(n), 42),
                               dx32 = random_floats(size_t(n), 43, 0.1f), dw0 = random_floats(size_t(c.D), 44, 0.1f);
      std::vector<float> w32 = random_floats(size_t(c.D), 45, 0.2f);
      for (float& v : w32) v += 1.0f;
      for (bool bf16 : {false, true})
        for (int which : {0, 1, 2, 3}) {  // dx and dw, dx only, dw only, a fresh dx (NaN bytes never read) and dw
          INFO("rows " << c.rows << " D " << c.D << " offset " << c.offset << " dtype " << name_of(bf16) << " grads "
                       << which);
          const DType dt = float_dtype(bf16);
          const bool fresh = which == 3;
          const std::vector<float> x = round_to(dt, x32), dy = round_to(dt, dy32),
                                   dx0 = fresh ? std::vector<float>(size_t(n), std::nanf("")) : round_to(dt, dx32),
                                   w = round_to(dt, w32);
          std::vector<float> rstd(size_t(c.rows)), y_out(static_cast<size_t>(n));
          kernels::cpu::rmsnorm_forward(x.data(), w.data(), y_out.data(), rstd.data(), c.rows, c.D, 1e-6f);
          Buf bx = upload(x, dt, c.offset), bw = upload(w, dt, 0), bdy = upload(dy, dt, c.offset),
              bdx = upload(dx0, dt, c.offset), bdw = upload(dw0, DType::f32, 0), brstd = upload(rstd, DType::f32, 0);
          Tensor partials =
              Tensor::persistent({kernels::cuda::rmsnorm_dw_partials(c.rows, c.D), c.D}, DType::f32);
          void* dx = which == 2 ? nullptr : bdx.ptr();
          void* dw = which == 1 ? nullptr : bdw.ptr();
          kernels::cuda::rmsnorm_backward(bx.ptr(), bw.ptr(), bf16, static_cast<const float*>(brstd.ptr()), bdy.ptr(),
                                          bf16, dx, bf16, dw, false, partials.data<float>(), c.rows, c.D, stream(ctx),
                                          fresh);
          const std::vector<float> got_dx = bdx.read(), got_dw = bdw.read();
          std::vector<float> want_dx = dx0, want_dw = dw0;
          kernels::cpu::rmsnorm_backward(x.data(), w.data(), rstd.data(), dy.data(), dx ? want_dx.data() : nullptr,
                                         dw ? want_dw.data() : nullptr, c.rows, c.D, fresh);
          CHECK(rel_err(got_dx, want_dx) <= (bf16 ? 1e-2 : 1e-5));
          CHECK(rel_err(got_dw, want_dw) <= 1e-5);  // dw is f32 (inputs rounded alike on both sides)
          if (!dx) CHECK(bitwise_equal(got_dx, dx0));
          if (!dw) CHECK(bitwise_equal(got_dw, dw0));
          // Deterministic: the same call from the same state gives the same bits.
          Buf again_dx = upload(dx0, dt, c.offset), again_dw = upload(dw0, DType::f32, 0);
          kernels::cuda::rmsnorm_backward(bx.ptr(), bw.ptr(), bf16, static_cast<const float*>(brstd.ptr()), bdy.ptr(),
                                          bf16, dx ? again_dx.ptr() : nullptr, bf16, dw ? again_dw.ptr() : nullptr,
                                          false, partials.data<float>(), c.rows, c.D, stream(ctx), fresh);
          CHECK(bitwise_equal(again_dx.read(), got_dx));
          CHECK(bitwise_equal(again_dw.read(), got_dw));
        }
    }
  }

  TEST_CASE("rmsnorm forward: register-resident rows (G lanes x P packs) and the looping fallback") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    struct Case {
      int64_t rows, D, offset;
    };
    // bf16 (packs of 8): 4096 = 32 lanes x 16 packs, 128 = 16 lanes x 1 (two rows a warp; 77 rows
    // end inside a warp), 256 = 32 x 1, 16 = 2 x 1, 1000 and 40: the looping kernel. f32 (packs
    // of 4): 4096 loops (32 packs a lane is too many), 2048 = 32 x 16, 128 = 32 x 1. Offset 1: the
    // scalar fallback.
    for (Case c : {Case{5000, 4096, 0}, Case{5000, 128, 0}, Case{77, 128, 0}, Case{9, 256, 0}, Case{33, 16, 0},
                   Case{5, 2048, 0}, Case{2, 1000, 0}, Case{130, 40, 0}, Case{300, 128, 1}}) {
      const int64_t n = c.rows * c.D;
      std::vector<float> w32 = random_floats(size_t(c.D), 55, 0.2f);
      for (float& v : w32) v += 1.0f;
      for (bool bf16 : {false, true})
        for (bool with_rstd : {true, false}) {
          INFO("rows " << c.rows << " D " << c.D << " offset " << c.offset << " dtype " << name_of(bf16)
                       << " rstd " << with_rstd);
          const DType dt = float_dtype(bf16);
          const std::vector<float> x = round_to(dt, random_floats(size_t(n), 56, 3.0f)), w = round_to(dt, w32);
          std::vector<float> want_y(static_cast<size_t>(n)), want_rstd(static_cast<size_t>(c.rows));
          kernels::cpu::rmsnorm_forward(x.data(), w.data(), want_y.data(), want_rstd.data(), c.rows, c.D, 1e-6f);
          const std::vector<float> nans(size_t(n), std::nanf("")), rstd_nans(size_t(c.rows), std::nanf(""));
          Buf bx = upload(x, dt, c.offset), bw = upload(w, dt, 0), by = upload(nans, dt, c.offset),
              brstd = upload(rstd_nans, DType::f32, 0);
          kernels::cuda::rmsnorm_forward(bx.ptr(), bw.ptr(), by.ptr(), bf16,
                                         with_rstd ? static_cast<float*>(brstd.ptr()) : nullptr, c.rows, c.D, 1e-6f,
                                         stream(ctx));
          const std::vector<float> got_y = by.read(), got_rstd = brstd.read();
          CHECK(rel_err(got_y, round_to(dt, want_y)) <= (bf16 ? 1e-2 : 1e-5));  // every row written
          if (with_rstd) CHECK(rel_err(got_rstd, want_rstd) <= 1e-5);
          else CHECK(std::isnan(got_rstd[0]));
        }
    }
  }

  // An independent statement of the resident layout's sum order (rmsnorm.cu), which the fused
  // norms copy for their bits: G lanes a row (the smallest power of two >= the row's packs, at
  // most 32), lane q owning packs q, q + G, ...; each lane's fma chain in pack order, then a
  // butterfly; rstd = 1 / sqrt(sum / D + eps) and y = (x * rstd) * w, each rounded once. The host
  // replays it in f32, so every bit is checked, and any change of the kernels' layout or order (a
  // row spread over several warps, say) must keep it.
  TEST_CASE("rmsnorm forward: resident rows give the bits of the documented sum order") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    struct Case {
      int64_t rows, D;
      bool bf16;
    };
    // bf16: 4096 = 32 lanes x 16 packs, 2048 = 32 x 8, 1024 = 32 x 4, 128 = 16 x 1 (two rows a
    // warp); f32: 2048 = 32 x 16 packs of 4, 1024 = 32 x 8. 999, 37 and 77 rows: partial last blocks.
    // 1500 x 4096: full blocks of 8 rows, which fill a GPU of up to 187 SMs; the others leave SMs idle
    // and so take fewer rows a block, their weights loaded ahead (resident_launch).
    for (Case c : {Case{999, 4096, true}, Case{1500, 4096, true}, Case{37, 2048, true}, Case{37, 1024, true},
                   Case{77, 128, true}, Case{999, 2048, false}, Case{37, 1024, false}}) {
      INFO("rows " << c.rows << " D " << c.D << " dtype " << name_of(c.bf16));
      const DType dt = float_dtype(c.bf16);
      const int N = c.bf16 ? 8 : 4;
      const int64_t packs = c.D / N;
      int64_t G = 32;
      while (G > 1 && G / 2 >= packs) G /= 2;
      REQUIRE(packs % G == 0);
      const int64_t P = packs / G, n = c.rows * c.D;
      const std::vector<float> x = round_to(dt, random_floats(size_t(n), 61, 3.0f));
      std::vector<float> w = random_floats(size_t(c.D), 62, 0.2f);
      for (float& v : w) v += 1.0f;
      w = round_to(dt, w);
      std::vector<float> want_y(static_cast<size_t>(n)), want_rstd(static_cast<size_t>(c.rows));
      for (int64_t r = 0; r < c.rows; ++r) {
        std::vector<float> lane(size_t(G), 0.0f);
        for (int64_t q = 0; q < G; ++q)
          for (int64_t k = 0; k < P; ++k)
            for (int i = 0; i < N; ++i) {
              const float f = x[size_t(r * c.D + (k * G + q) * N + i)];
              lane[size_t(q)] = std::fma(f, f, lane[size_t(q)]);
            }
        for (int64_t o = G / 2; o > 0; o /= 2) {
          std::vector<float> next(lane);
          for (int64_t q = 0; q < G; ++q) next[size_t(q)] = lane[size_t(q)] + lane[size_t(q ^ o)];
          lane = next;
        }
        const float s = 1.0f / std::sqrt(lane[0] / float(c.D) + 1e-6f);
        want_rstd[size_t(r)] = s;
        for (int64_t j = 0; j < c.D; ++j) {
          const float xs = x[size_t(r * c.D + j)] * s;
          want_y[size_t(r * c.D + j)] = stored(dt, xs * w[size_t(j)]);
        }
      }
      const std::vector<float> nans(size_t(n), std::nanf("")), rstd_nans(size_t(c.rows), std::nanf(""));
      Buf bx = upload(x, dt, 0), bw = upload(w, dt, 0), by = upload(nans, dt, 0), brstd = upload(rstd_nans, DType::f32, 0);
      kernels::cuda::rmsnorm_forward(bx.ptr(), bw.ptr(), by.ptr(), c.bf16, static_cast<float*>(brstd.ptr()), c.rows, c.D,
                                     1e-6f, stream(ctx));
      const std::vector<float> got_y = by.read(), got_rstd = brstd.read();
      CHECK(std::memcmp(got_rstd.data(), want_rstd.data(), want_rstd.size() * sizeof(float)) == 0);
      CHECK(std::memcmp(got_y.data(), want_y.data(), want_y.size() * sizeof(float)) == 0);
    }
  }
}

// Probes for compute-sanitizer initcheck (scripts/gpu-test.sh runs it on "gpu-sanitize"). The
// SwiGLU map kernel reads exactly n elements of gate and up (whole 16-byte packs below n / 8 * 8,
// single elements after), so an "uninitialized read" there means gate or up were never seen as
// written. The first probe feeds it tensors written by our own kernels and host copies: it must be
// clean. The second feeds it cuBLAS outputs, as the model does: a report there and none in the
// first says the sanitizer did not track the GEMM's stores, not that SwiGLU reads past its data.
TEST_SUITE("gpu-sanitize") {
  TEST_CASE("initcheck probe: swiglu over inputs written by our kernels and host copies") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    for (int64_t n : {int64_t(8), int64_t(1003), int64_t(65536)}) {
      Tensor gate = make_float({n}, random_floats(size_t(n), 1), DType::bf16);  // host copy
      Tensor up = Tensor::persistent({n}, DType::bf16);
      kernels::cuda::fill(up.raw(), true, n, 0.5f, ctx.cuda_stream());  // our kernel
      gate.set_requires_grad(true);
      up.set_requires_grad(true);
      Tensor y = ops::swiglu(ops::scale(gate, 1.0f), ops::scale(up, 1.0f));
      run_backward({y}, {make_float({n}, random_floats(size_t(n), 2), DType::bf16)});
      CHECK(std::isfinite(max_abs(gate.grad().to_floats())));
    }
  }

  TEST_CASE("initcheck probe: swiglu over cuBLAS GEMM outputs (the model's MLP)") {
    REQUIRE_GPU();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    const int64_t rows = 256, H = 128, I = 256;  // the gpu-sanitize toy model's MLP
    Tensor h = make_float({rows, H}, random_floats(size_t(rows * H), 3), DType::bf16);
    Tensor wg = make_float({I, H}, random_floats(size_t(I * H), 4, 0.1f), DType::bf16);
    Tensor wu = make_float({I, H}, random_floats(size_t(I * H), 5, 0.1f), DType::bf16);
    Tensor y = ops::swiglu(ops::linear(h, wg), ops::linear(h, wu));
    CHECK(std::isfinite(max_abs(y.to_floats())));
  }
}

#endif  // DFLASH_CUDA

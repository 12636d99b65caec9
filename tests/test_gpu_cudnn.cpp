// The target's causal attention on cuDNN's fused flash attention against the CPU reference
// (kernels/cpu/causal_attention.cpp), next to dflash's own kernel on the same cases; the cuDNN
// path's determinism, a recording replaying bit for bit like eager, the refusal to build a plan
// inside a capture, a plan per shape and softmax scale, which calls stay on dflash's kernel, the
// line that says which one runs, and every plan cuDNN lists for a shape (the runtime runs its
// default; dflash-bench causal-attention --plans times the others).
// Suite "gpu-cudnn": it needs a GPU and a build with the cuDNN path, and fails without either.
#ifdef DFLASH_CUDA
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

#include "graphs/program.h"
#include "runtime/cuda/cudnn_attention.h"
#include "runtime/target_attention.h"
#ifdef DFLASH_CUDNN
#include "kernels/cuda/cudnn_sdpa.h"
#endif
#include "tests/gpu_test_util.h"
#include "tests/test_util.h"

using namespace dflash;
using namespace dflash::test;

namespace {

#define REQUIRE_CUDNN()                                                                                       \
  REQUIRE_GPU();                                                                                              \
  if (!::dflash::cudnn_attention_built())                                                                     \
  FAIL("this build has no cuDNN path (CMake found no cuDNN or no cudnn-frontend in .deps/cudnn-frontend): run " \
       "scripts/setup.sh, carry .deps to the GPU host and rebuild")

struct Case {
  int64_t B, S, nh, nkv, hd;
  float scale = 0;  // the softmax scale; 0: 1/sqrt(hd)
};
struct Inputs {
  std::vector<float> q, k, v;
};
Inputs inputs(const Case& c, uint64_t seed) {
  return {random_floats(size_t(c.B * c.S * c.nh * c.hd), seed), random_floats(size_t(c.B * c.S * c.nkv * c.hd), seed + 1),
          random_floats(size_t(c.B * c.S * c.nkv * c.hd), seed + 2)};
}
float scale_of(const Case& c) { return c.scale != 0 ? c.scale : float(1.0 / std::sqrt(double(c.hd))); }

struct Run {
  std::vector<float> out;
  bool on_cudnn = false;  // what cudnn_attention::use said for these tensors
};

// The op on ctx with `backend` asked for, inputs rounded to dt (f32 on the CPU); offset_elems > 0
// puts every tensor that many elements into a larger buffer (off 16-byte alignment when odd).
Run run(Context& ctx, TargetAttention backend, DType dt, const Case& c, const Inputs& in, int64_t offset_elems = 0) {
  ContextScope scope(ctx);
  TargetAttentionScope want(backend);
  const DType type = ctx.device().is_cpu() ? DType::f32 : dt;
  auto make = [&](const Shape& s, const std::vector<float>& v) {
    if (offset_elems == 0) return make_float(s, round_to(dt, v), type);
    std::vector<float> padded(size_t(offset_elems), 0.0f);
    std::vector<float> r = round_to(dt, v);
    padded.insert(padded.end(), r.begin(), r.end());
    return make_float({int64_t(padded.size())}, padded, type).rows(offset_elems, int64_t(padded.size())).reshape(s);
  };
  const Tensor q = make({c.B, c.S, c.nh, c.hd}, in.q), k = make({c.B, c.S, c.nkv, c.hd}, in.k),
               v = make({c.B, c.S, c.nkv, c.hd}, in.v);
  const Tensor out = ops::causal_attention(q, k, v, scale_of(c));
  REQUIRE(out.shape() == q.shape());
  REQUIRE(out.dtype() == type);
  Run r;
  r.out = out.to_floats();
  if (ctx.device().is_cuda())
    r.on_cudnn = cudnn_attention::use(
        ctx, {q.raw(), k.raw(), v.raw(), out.raw(), type == DType::bf16, c.B, c.S, c.nh, c.nkv, c.hd, scale_of(c)});
  return r;
}

// bf16 inputs on both backends; the CPU runs f32 on the same rounded values.
constexpr double kTolerance = 2e-2;  // max |gpu - cpu| / max |cpu|, as gpu-misc's bf16 attention

std::string describe(const Case& c) {
  std::ostringstream s;
  s << "B " << c.B << " S " << c.S << " heads " << c.nh << "/" << c.nkv << " hd " << c.hd << " scale " << scale_of(c);
  return s.str();
}

// Both backends against the CPU; cuDNN must really have run when must_use_cudnn.
void check_both(Backends& be, const Case& c, bool must_use_cudnn) {
  INFO(describe(c));
  const Inputs in = inputs(c, uint64_t(c.S * 1000 + c.hd * 10 + c.nh));
  const std::vector<float> cpu = run(be.cpu, TargetAttention::own, DType::bf16, c, in).out;
  for (TargetAttention backend : {TargetAttention::cudnn, TargetAttention::own}) {
    INFO("backend " << target_attention_name(backend));
    const Run gpu = run(be.gpu, backend, DType::bf16, c, in);
    if (backend == TargetAttention::own) CHECK_FALSE(gpu.on_cudnn);
    if (backend == TargetAttention::cudnn && must_use_cudnn) CHECK(gpu.on_cudnn);
    const double err = rel_err(gpu.out, cpu);
    INFO("relative error " << err);
    CHECK(err <= kTolerance);
  }
}

// Collects what is written to stderr (fd 2) between construction and finish().
class StderrCapture {
 public:
  StderrCapture() {
    std::fflush(stderr);
    char name[] = "/tmp/dflash-stderr-XXXXXX";
    const int fd = mkstemp(name);
    REQUIRE(fd >= 0);
    path_ = name;
    saved_ = dup(2);
    dup2(fd, 2);
    close(fd);
  }
  std::string finish() {
    std::fflush(stderr);
    dup2(saved_, 2);
    close(saved_);
    std::ifstream f(path_);
    std::stringstream s;
    s << f.rdbuf();
    std::remove(path_.c_str());
    return s.str();
  }

 private:
  std::string path_;
  int saved_ = -1;
};

}  // namespace

TEST_SUITE("gpu-cudnn") {
  TEST_CASE("cuDNN and own causal attention equal the CPU (B 2; S 37, 129, 150, 600; GQA 1 and 4; hd 64, 128)") {
    REQUIRE_CUDNN();
    Backends be;
    for (int64_t hd : {64, 128})
      for (int64_t group : {1, 4})
        for (int64_t S : {37, 129, 150, 600}) check_both(be, Case{2, S, 2 * group, 2, hd}, true);
  }

  TEST_CASE("cuDNN and own causal attention equal the CPU at the target's heads (32/8, hd 128, S 1000)") {
    REQUIRE_CUDNN();
    Backends be;
    check_both(be, Case{1, 1000, 32, 8, 128}, true);
  }

  TEST_CASE("a cuDNN plan serves one shape and softmax scale: one context alternating two lengths and two scales "
            "equals the CPU on each call") {
    REQUIRE_CUDNN();
    Backends be;
    for (const Case& c : {Case{2, 129, 8, 2, 128}, Case{2, 129, 8, 2, 128, 0.5f}, Case{2, 150, 8, 2, 128},
                          Case{2, 129, 8, 2, 128}, Case{2, 150, 8, 2, 128, 0.5f}})
      check_both(be, c, true);
  }

  TEST_CASE("shapes cuDNN may refuse still equal the CPU, on whichever implementation runs them") {
    REQUIRE_CUDNN();
    Backends be;
    for (const Case& c : {Case{2, 1, 4, 2, 128}, Case{1, 150, 4, 2, 256}, Case{1, 70, 4, 1, 8}, Case{1, 70, 4, 2, 40},
                          Case{1, 70, 2, 2, 96}})
      check_both(be, c, false);
  }

  TEST_CASE("f32 and unaligned bf16 stay on dflash's kernel and equal the CPU") {
    REQUIRE_CUDNN();
    Backends be;
    const Case c{2, 70, 4, 2, 64};
    const Inputs in = inputs(c, 3);
    const std::vector<float> cpu = run(be.cpu, TargetAttention::own, DType::f32, c, in).out;
    const Run f32 = run(be.gpu, TargetAttention::cudnn, DType::f32, c, in);
    CHECK_FALSE(f32.on_cudnn);
    CHECK(rel_err(f32.out, cpu) <= 1e-4);
    const std::vector<float> cpu_bf16 = run(be.cpu, TargetAttention::own, DType::bf16, c, in).out;
    const Run unaligned = run(be.gpu, TargetAttention::cudnn, DType::bf16, c, in, 1);
    CHECK_FALSE(unaligned.on_cudnn);
    CHECK(rel_err(unaligned.out, cpu_bf16) <= kTolerance);
    const Run aligned = run(be.gpu, TargetAttention::cudnn, DType::bf16, c, in, 8);  // 16 bytes in: aligned
    CHECK(aligned.on_cudnn);
    CHECK(rel_err(aligned.out, cpu_bf16) <= kTolerance);
  }

  TEST_CASE("cuDNN causal attention is deterministic: the same call twice gives the same bits") {
    REQUIRE_CUDNN();
    Backends be;
    const Case c{2, 600, 8, 2, 128};
    const Inputs in = inputs(c, 5);
    const Run a = run(be.gpu, TargetAttention::cudnn, DType::bf16, c, in);
    const Run b = run(be.gpu, TargetAttention::cudnn, DType::bf16, c, in);
    REQUIRE(a.on_cudnn);
    CHECK(bitwise_equal(a.out, b.out));
  }

  TEST_CASE("cuDNN causal attention recorded as a CUDA graph replays bit for bit like eager") {
    REQUIRE_CUDNN();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    TargetAttentionScope want(TargetAttention::cudnn);
    const Case c{2, 300, 8, 2, 128};
    const Inputs in = inputs(c, 9);
    const Tensor q = make_float({c.B, c.S, c.nh, c.hd}, in.q, DType::bf16),
                 k = make_float({c.B, c.S, c.nkv, c.hd}, in.k, DType::bf16),
                 v = make_float({c.B, c.S, c.nkv, c.hd}, in.v, DType::bf16);
    const Tensor out = Tensor::persistent(q.shape(), DType::bf16);
    auto body = [&] {
      // An attention over attention's output keeps a temporary alive across two calls.
      const Tensor a = ops::causal_attention(q, k, v, 0.125f);
      ops::copy_(out, ops::causal_attention(a, k, v, 0.125f));
    };
    // The planning pass alone builds the plan: the first call of the shape is not eager here.
    ctx.reserve_arena(plan_program(ctx, "cudnn-attention", body).arena_bytes);
    Program p = record_program(ctx, "cudnn-attention", body);
    REQUIRE(cudnn_attention::use(ctx, {q.raw(), k.raw(), v.raw(), out.raw(), true, c.B, c.S, c.nh, c.nkv, c.hd, 0.125f}));
    body();
    ctx.synchronize();
    const std::vector<float> eager = out.to_floats();
    REQUIRE(max_abs(eager) > 0);
    ops::copy_(out, make_float(out.shape(), std::vector<float>(size_t(out.numel()), NAN), DType::bf16));
    ctx.synchronize();
    p.replay();
    ctx.synchronize();
    CHECK(bitwise_equal(out.to_floats(), eager));
  }

  TEST_CASE("a cuDNN plan is never built inside a capture: recording an unplanned shape fails with the fix") {
    REQUIRE_CUDNN();
    Context ctx{Device::cuda(0)};
    ContextScope scope(ctx);
    TargetAttentionScope want(TargetAttention::cudnn);
    const Case c{1, 77, 8, 2, 64};
    const Inputs in = inputs(c, 11);
    const Tensor q = make_float({c.B, c.S, c.nh, c.hd}, in.q, DType::bf16),
                 k = make_float({c.B, c.S, c.nkv, c.hd}, in.k, DType::bf16),
                 v = make_float({c.B, c.S, c.nkv, c.hd}, in.v, DType::bf16);
    const Tensor out = Tensor::persistent(q.shape(), DType::bf16);
    auto body = [&] { ops::copy_(out, ops::causal_attention(q, k, v, 0.125f)); };
    ctx.reserve_arena(size_t(4) << 20);
    CHECK_THROWS_WITH_AS(record_program(ctx, "unplanned", body),
                         doctest::Contains("cuDNN has no plan yet for B=1 S=77 heads 8/2 head_dim 64 and program "
                                           "'unplanned' is being recorded"),
                         Error);
    CHECK_THROWS_WITH_AS(record_program(ctx, "unplanned", body),
                         doctest::Contains("run the planning pass first (plan_program"), Error);
    // The context stays usable: planned, the same program records and replays like eager.
    plan_program(ctx, "planned", body);
    Program p = record_program(ctx, "planned", body);
    body();
    ctx.synchronize();
    const std::vector<float> eager = out.to_floats();
    p.replay();
    ctx.synchronize();
    CHECK(bitwise_equal(out.to_floats(), eager));
  }

#ifdef DFLASH_CUDNN
  TEST_CASE("every plan cuDNN lists and builds equals the CPU; an unlisted one does not build") {
    REQUIRE_CUDNN();
    const Case c{1, 300, 32, 8, 128};  // the target's heads
    const Inputs in = inputs(c, 17);
    Backends be;
    const std::vector<float> cpu = run(be.cpu, TargetAttention::own, DType::bf16, c, in).out;
    ContextScope scope(be.gpu);
    std::string why;
    void* handle = kernels::cuda::cudnn_create(&why);
    REQUIRE_MESSAGE(handle, why);
    const kernels::cuda::CudnnSdpaDims d{c.B, c.S, c.nh, c.nkv, c.hd, scale_of(c)};
    const auto plans = kernels::cuda::CudnnSdpa::list_plans(handle, d, &why);
    INFO("cuDNN: " << why);
    REQUIRE(!plans.empty());
    const Tensor q = make_float({c.B, c.S, c.nh, c.hd}, round_to(DType::bf16, in.q), DType::bf16),
                 k = make_float({c.B, c.S, c.nkv, c.hd}, round_to(DType::bf16, in.k), DType::bf16),
                 v = make_float({c.B, c.S, c.nkv, c.hd}, round_to(DType::bf16, in.v), DType::bf16);
    int ran = 0;
    for (const auto& p : plans) {
      auto sdpa = kernels::cuda::CudnnSdpa::build(handle, d, nullptr, p);
      if (!sdpa) continue;  // listed, but this one does not build
      INFO("plan " << p.implementation << ":" << p.engine);
      const Tensor out = Tensor::persistent(q.shape(), DType::bf16, "out");
      const size_t ws_bytes = sdpa->workspace_bytes();
      const Tensor ws = ws_bytes ? Tensor::persistent({int64_t((ws_bytes + 3) / 4)}, DType::f32, "ws") : Tensor();
      sdpa->forward(handle, q.raw(), k.raw(), v.raw(), out.raw(), ws_bytes ? ws.raw() : nullptr, be.gpu.cuda_stream());
      be.gpu.synchronize();
      CHECK(rel_err(out.to_floats(), cpu) <= kTolerance);
      ++ran;
    }
    CHECK(ran >= 1);
    std::string why_not;
    CHECK_FALSE(kernels::cuda::CudnnSdpa::build(handle, d, &why_not, {"unified", "no-such-engine"}));
    CHECK_FALSE(why_not.empty());
    kernels::cuda::cudnn_destroy(handle);
  }
#endif

  TEST_CASE("the first call says on stderr which implementation runs the target's attention") {
    REQUIRE_CUDNN();
    Backends be;
    const Case c{1, 40, 4, 2, 64};
    const Inputs in = inputs(c, 13);
    run(be.gpu, TargetAttention::cudnn, DType::bf16, c, in);  // from here on cuDNN is the one last announced
    StderrCapture own_text;
    run(be.gpu, TargetAttention::own, DType::bf16, c, in);
    run(be.gpu, TargetAttention::own, DType::bf16, c, in);
    const std::string own = own_text.finish();
    CHECK(own ==
          "dflash: target causal attention (bf16, CUDA): dflash's own kernel (runtime.target_attention = \"own\")\n");
    StderrCapture cudnn_text;
    run(be.gpu, TargetAttention::cudnn, DType::bf16, c, in);
    const std::string cudnn = cudnn_text.finish();
    CHECK(cudnn.find("dflash: target causal attention (bf16, CUDA): cuDNN fused flash attention, cuDNN 9.") == 0);
    CHECK(cudnn.find("cudnn-frontend 1.32.0 (runtime.target_attention = \"own\" selects dflash's kernel)\n") !=
          std::string::npos);
  }
}
#endif

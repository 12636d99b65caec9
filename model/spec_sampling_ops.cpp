// The sampled speculative-decoding ops: shape checks and kernel calls (kernels/cpu/spec_sampling.cpp,
// kernels/cuda/spec_sampling.cu).
#include "model/spec_ops.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/decode_kernels.h"
#endif

namespace dflash::spec {
using namespace ops::detail;

namespace {
void check_rows(const char* op, const Tensor& t, const char* role) {
  check_dtype(op, t, DType::f32, role);
  DF_CHECK(t.ndim() == 2 && t.dim(1) >= 1, op << ": " << role << " is " << t.describe() << " but must be f32 [n, V]");
}
void check_i32_n(const char* op, const Tensor& t, int64_t n, const char* role) {
  check_dtype(op, t, DType::i32, role);
  DF_CHECK(t.numel() == n, op << ": " << role << " is " << t.describe() << " but must hold " << n << " i32");
}
}  // namespace

Tensor sampling_probs(const Tensor& logits, const SamplingParams& s) {
  constexpr const char* kOp = "sampling_probs";
  OpScope op(kOp);
  check_rows(kOp, logits, "logits");
  DF_CHECK(s.temperature > 0 && s.top_p > 0 && s.top_p <= 1 && s.top_k >= 0,
           kOp << ": temperature " << s.temperature << ", top_p " << s.top_p << ", top_k " << s.top_k
               << ": temperature must be > 0, top_p in (0, 1], top_k >= 0");
  const int64_t n = logits.dim(0), V = logits.dim(1);
  Tensor probs = Tensor::empty({n, V}, DType::f32);
  const float* x = f32(logits);
  float* p = f32(probs);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::sampling_probs(x, n, V, s, p); });
    return probs;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch())
    kernels::cuda::sampling_probs(x, n, V, {s.temperature, s.top_p, s.top_k}, p, st);
#else
  no_cuda_kernel(kOp);
#endif
  return probs;
}

void sample(const Tensor& state, int base, int plus, int64_t offset, const Tensor& probs, SamplePurpose purpose,
            const Tensor& tokens) {
  constexpr const char* kOp = "spec_sample";
  OpScope op(kOp);
  check_i32_n(kOp, state, kSpecStateFields, "the state");
  DF_CHECK(base >= 0 && base < kSpecStateFields && plus >= 0 && plus < kSpecStateFields,
           kOp << ": state fields " << base << " and " << plus << " must be in [0, " << kSpecStateFields << ")");
  check_rows(kOp, probs, "probs");
  const int64_t n = probs.dim(0), V = probs.dim(1);
  check_i32_n(kOp, tokens, n, "tokens");
  check_same_device(kOp, {&state, &probs, &tokens});
  const int32_t* ps = i32(state);
  const float* pp = f32(probs);
  int32_t* pt = i32(tokens);
  const int pu = int(purpose);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_sample(ps, base, plus, offset, pp, n, V, pu, pt); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::spec_sample(ps, base, plus, offset, pp, n, V, pu, pt, s);
#else
  no_cuda_kernel(kOp);
#endif
}

void accept_sampled(const Tensor& state, const Tensor& block, const Tensor& p, const Tensor& q, int32_t rollback_bias,
                    bool accept_all, const Tensor& result) {
  constexpr const char* kOp = "spec_accept_sampled";
  OpScope op(kOp);
  check_i32_n(kOp, state, kSpecStateFields, "the state");
  const int64_t bs = block.numel();
  check_i32_n(kOp, block, bs, "block");
  check_rows(kOp, p, "p");
  check_rows(kOp, q, "q");
  DF_CHECK(p.dim(0) == bs && q.shape() == p.shape(),
           kOp << ": p " << p.describe() << " and q " << q.describe() << " must both be f32 [" << bs << ", V]");
  check_i32_n(kOp, result, kSpecRoundHeader + bs, "result");
  check_same_device(kOp, {&state, &block, &p, &q, &result});
  const int64_t V = p.dim(1);
  int32_t *ps = i32(state), *pr = i32(result);
  const int32_t* pb = i32(block);
  const float *pp = f32(p), *pq = f32(q);
  if (on_cpu())
    return ctx().launch([=] { kernels::cpu::spec_accept_sampled(ps, pb, pp, pq, bs, V, rollback_bias, accept_all, pr); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch())
    kernels::cuda::spec_accept_sampled(ps, pb, pp, pq, bs, V, rollback_bias, accept_all, pr, s);
#else
  no_cuda_kernel(kOp);
#endif
}

}  // namespace dflash::spec

// The speculative-decoding control ops: shape checks and kernel calls (kernels/cpu/spec_decode.cpp,
// kernels/cuda/spec_decode.cu).
#include "model/spec_ops.h"

#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/decode_kernels.h"
#endif

namespace dflash::spec {
using namespace ops::detail;

namespace {
void check_i32(const char* op, const Tensor& t, int64_t numel, const char* role) {
  check_dtype(op, t, DType::i32, role);
  DF_CHECK(t.numel() == numel, op << ": " << role << " is " << t.describe() << " but must hold " << numel << " i32");
  check_same_device(op, {&t});
}
void check_state(const char* op, const Tensor& state) { check_i32(op, state, kSpecStateFields, "the state"); }
}  // namespace

Tensor state_field(const Tensor& state, int f) {
  DF_CHECK(f >= 0 && f < kSpecStateFields, "spec state field " << f << " is out of range");
  return state.rows(f, f + 1);
}

static void check_token(const char* op, const ops::ArgmaxRows& best, const Tensor& result) {
  check_i32(op, best.index, 1, "argmax index");
  check_dtype(op, best.margin, DType::f32, "argmax margin");
  check_dtype(op, best.top, DType::f32, "argmax top");
  check_i32(op, result, kSpecTokenResult, "result");
}

void prefill_commit(const Tensor& state, const ops::ArgmaxRows& last, const Tensor& result) {
  constexpr const char* kOp = "spec_prefill_commit";
  OpScope op(kOp);
  check_state(kOp, state);
  check_token(kOp, last, result);
  int32_t *ps = i32(state), *pr = i32(result);
  const int32_t* pa = i32(last.index);
  const float *pm = f32(last.margin), *pt = f32(last.top);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_prefill_commit(ps, pa, pm, pt, pr); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::spec_prefill_commit(ps, pa, pm, pt, pr, s);
#else
  no_cuda_kernel(kOp);
#endif
}

void make_block(const Tensor& state, int32_t mask_token_id, const Tensor& block) {
  constexpr const char* kOp = "spec_make_block";
  OpScope op(kOp);
  check_state(kOp, state);
  const int64_t bs = block.numel();
  check_i32(kOp, block, bs, "block");
  const int32_t* ps = i32(state);
  int32_t* pb = i32(block);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_make_block(ps, mask_token_id, bs, pb); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::spec_make_block(ps, mask_token_id, bs, pb, s);
#else
  no_cuda_kernel(kOp);
#endif
}

void fill_block(const Tensor& drafted, const Tensor& block) {
  constexpr const char* kOp = "spec_fill_block";
  OpScope op(kOp);
  const int64_t bs = block.numel();
  check_i32(kOp, block, bs, "block");
  check_i32(kOp, drafted, bs, "drafted");
  const int32_t* pd = i32(drafted);
  int32_t* pb = i32(block);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_fill_block(pd, bs, pb); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::spec_fill_block(pd, bs, pb, s);
#else
  no_cuda_kernel(kOp);
#endif
}

void accept(const Tensor& state, const Tensor& block, const Tensor& p, int32_t rollback_bias, const Tensor& result) {
  constexpr const char* kOp = "spec_accept";
  OpScope op(kOp);
  check_state(kOp, state);
  const int64_t bs = block.numel();
  check_i32(kOp, block, bs, "block");
  check_i32(kOp, p, bs, "p");
  check_i32(kOp, result, kSpecRoundHeader + bs, "result");
  int32_t *ps = i32(state), *pr = i32(result);
  const int32_t *pb = i32(block), *pp = i32(p);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_accept(ps, pb, pp, bs, rollback_bias, pr); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::spec_accept(ps, pb, pp, bs, rollback_bias, pr, s);
#else
  no_cuda_kernel(kOp);
#endif
}

void step_commit(const Tensor& state, const ops::ArgmaxRows& best, const Tensor& result) {
  constexpr const char* kOp = "spec_step_commit";
  OpScope op(kOp);
  check_state(kOp, state);
  check_token(kOp, best, result);
  int32_t *ps = i32(state), *pr = i32(result);
  const int32_t* pa = i32(best.index);
  const float *pm = f32(best.margin), *pt = f32(best.top);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::spec_step_commit(ps, pa, pm, pt, pr); });
#ifdef DFLASH_CUDA
  if (void* s = ctx().cuda_stream_for_launch()) kernels::cuda::spec_step_commit(ps, pa, pm, pt, pr, s);
#else
  no_cuda_kernel(kOp);
#endif
}

}  // namespace dflash::spec

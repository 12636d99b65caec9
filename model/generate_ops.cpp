// The continuous-batching control ops: shape checks and kernel calls (kernels/cpu/generate.cpp,
// kernels/cuda/generate.cu).
#include "model/generate_ops.h"

#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/generate_kernels.h"
#endif

namespace dflash::generate {
using namespace ops::detail;

namespace {
void check_i32(const char* op, const Tensor& t, int64_t numel, const char* role) {
  DF_CHECK(t.defined(), op << ": " << role << " is undefined");
  check_dtype(op, t, DType::i32, role);
  DF_CHECK(t.numel() == numel, op << ": " << role << " is " << t.describe() << " but must hold " << numel << " i32");
  check_same_device(op, {&t});
}
// The slot count of a state i32 [S, kGenerateSlotFields].
int64_t slots_of(const char* op, const Tensor& state) {
  DF_CHECK(state.defined() && state.dtype() == DType::i32 && state.ndim() == 2 && state.dim(1) == kGenerateSlotFields,
           op << ": the slot state is " << state.describe() << " but must be i32 [S, " << kGenerateSlotFields << "]");
  return state.dim(0);
}
}  // namespace

StepRows step_rows(const Tensor& state) {
  constexpr const char* kOp = "generate_step_rows";
  OpScope op(kOp);
  const int64_t S = slots_of(kOp, state);
  StepRows r{Tensor::empty({S}, DType::i32), Tensor::empty({S}, DType::i32)};
  const int32_t* ps = i32(state);
  int32_t *pi = i32(r.ids), *pp = i32(r.pos);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::generate_step_rows(ps, S, pi, pp); });
    return r;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::generate_step_rows(ps, S, pi, pp, st);
#else
  no_cuda_kernel(kOp);
#endif
  return r;
}

Entries entries(const Tensor& rows, const Tensor& slot, const Tensor& pos) {
  constexpr const char* kOp = "generate_entries";
  OpScope op(kOp);
  DF_CHECK(rows.defined() && rows.ndim() == 1, kOp << ": rows " << rows.describe() << " must be i32 [m]");
  const int64_t m = rows.dim(0), P = slot.defined() ? slot.numel() : 0;
  check_i32(kOp, rows, m, "rows");
  check_i32(kOp, slot, P, "slot");
  check_i32(kOp, pos, P, "pos");
  Entries e{Tensor::empty({m}, DType::i32), Tensor::empty({m}, DType::i32)};
  const int32_t *pr = i32(rows), *ps = i32(slot), *pp = i32(pos);
  int32_t *es = i32(e.slot), *ep = i32(e.pos);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::generate_entries(pr, m, ps, pp, P, es, ep); });
    return e;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::generate_entries(pr, m, ps, pp, P, es, ep, st);
#else
  no_cuda_kernel(kOp);
#endif
  return e;
}

Tensor sample(const Tensor& state, const Tensor& probs, const Entries& e) {
  constexpr const char* kOp = "generate_sample";
  OpScope op(kOp);
  const int64_t S = slots_of(kOp, state);
  check_dtype(kOp, probs, DType::f32, "probs");
  DF_CHECK(probs.ndim() == 2 && probs.dim(1) >= 1, kOp << ": probs is " << probs.describe() << " but must be f32 [m, V]");
  const int64_t m = probs.dim(0), V = probs.dim(1);
  check_i32(kOp, e.slot, m, "entry slots");
  check_i32(kOp, e.pos, m, "entry positions");
  check_same_device(kOp, {&state, &probs});
  Tensor tokens = Tensor::empty({m}, DType::i32);
  const int32_t *ps = i32(state), *es = i32(e.slot), *ep = i32(e.pos);
  const float* pp = f32(probs);
  int32_t* pt = i32(tokens);
  if (on_cpu()) {
    ctx().launch([=] { kernels::cpu::generate_sample(ps, S, pp, m, V, es, ep, pt); });
    return tokens;
  }
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::generate_sample(ps, S, pp, m, V, es, ep, pt, st);
#else
  no_cuda_kernel(kOp);
#endif
  return tokens;
}

void commit(const Tensor& state, const Entries& e, const Tensor& chosen, const Tensor& result) {
  constexpr const char* kOp = "generate_commit";
  OpScope op(kOp);
  const int64_t S = slots_of(kOp, state);
  const int64_t m = chosen.defined() ? chosen.numel() : 0;
  check_i32(kOp, chosen, m, "chosen");
  check_i32(kOp, e.slot, m, "entry slots");
  check_i32(kOp, e.pos, m, "entry positions");
  check_i32(kOp, result, m, "result");
  check_same_device(kOp, {&state, &result});
  int32_t *ps = i32(state), *pr = i32(result);
  const int32_t *es = i32(e.slot), *ep = i32(e.pos), *pc = i32(chosen);
  if (on_cpu()) return ctx().launch([=] { kernels::cpu::generate_commit(ps, S, es, ep, pc, m, pr); });
#ifdef DFLASH_CUDA
  if (void* st = ctx().cuda_stream_for_launch()) kernels::cuda::generate_commit(ps, S, es, ep, pc, m, pr, st);
#else
  no_cuda_kernel(kOp);
#endif
}

}  // namespace dflash::generate

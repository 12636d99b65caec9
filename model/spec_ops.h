// The control ops of greedy speculative decoding (docs/MODEL.md, "Speculative decoding"): small
// kernels that move the decode state between a recorded program's passes, so that a round never
// waits for the host. The state is i32 [kSpecStateFields] on the device; its fields are
// kernels::cpu::spec_state. No gradients.
#pragma once
#include <cstdint>

#include "kernels/cpu/decode_kernels.h"
#include "runtime/decode_ops.h"
#include "runtime/tensor.h"

namespace dflash::spec {

namespace field = kernels::cpu::spec_state;
using kernels::cpu::kSpecRoundHeader;
using kernels::cpu::kSpecTokenResult;
using kernels::cpu::kSpecStateFields;

// The i32 [1] view of one field of the state.
Tensor state_field(const Tensor& state, int field);

// After a prefill chunk (its rows cached by the target and appended to the drafter's context):
// target_len += chunk_count, start = target_len, token = the argmax; result i32 [kSpecTokenResult]
// = {token, the f32 bits of its top-2 margin and of its logit}.
void prefill_commit(const Tensor& state, const ops::ArgmaxRows& last, const Tensor& result);
// block i32 [bs] = [token, mask, ..., mask].
void make_block(const Tensor& state, int32_t mask_token_id, const Tensor& block);
// block[1..bs-1] = drafted[1..bs-1] (drafted i32 [bs]: the drafter's argmax per slot).
void fill_block(const Tensor& drafted, const Tensor& block);
// Acceptance after the verify pass (p i32 [bs], the target's argmax per slot): result i32
// [kSpecRoundHeader + bs] = {a, p[a], block...}; start += a + 1; the target's cache rolls back to
// start (+ rollback_bias: a test hook, 0 in real use); the accepted positions' features become
// pending drafter context (ctx_at = old start, ctx_count = a + 1); token = p[a].
void accept(const Tensor& state, const Tensor& block, const Tensor& p, int32_t rollback_bias, const Tensor& result);
// After a target-alone step: target_len += 1, token = the argmax; result as prefill_commit's.
void step_commit(const Tensor& state, const ops::ArgmaxRows& best, const Tensor& result);

// Sampling (model/spec_sampling_ops.cpp; kernels/cpu/spec_sampling.cpp says what each computes).
using kernels::cpu::SamplingParams;
using kernels::cpu::SamplePurpose;
// f32 [n, V] logits -> f32 [n, V] sampling probabilities.
Tensor sampling_probs(const Tensor& logits, const SamplingParams& s);
// tokens i32 [n]: row r drawn with the uniform number of position state[base] + state[plus] +
// offset + r and `purpose`.
void sample(const Tensor& state, int base, int plus, int64_t offset, const Tensor& probs, SamplePurpose purpose,
            const Tensor& tokens);
// The rejection step (p, q f32 [bs, V]); result and state as accept's.
void accept_sampled(const Tensor& state, const Tensor& block, const Tensor& p, const Tensor& q, int32_t rollback_bias,
                    bool accept_all, const Tensor& result);

}  // namespace dflash::spec

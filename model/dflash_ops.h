// DFlash's data-side ops (no gradients): the tensors a step derives from its static inputs, and
// the metric sums it reports. Kernels: kernels/cpu/dflash_batch.cpp.
#pragma once
#include "runtime/tensor.h"

namespace dflash {

struct DFlashPrepared {
  Tensor noise_ids;  // i32 [B, T]
  Tensor q_pos;      // i32 [B, T]
  Tensor k_pos;      // i32 [B, S+T]
  Tensor labels;     // i32 [B, T] (-1 past the end)
  Tensor w;          // f32 [B, T] loss-mask weight
  Tensor lw;         // f32 [B, T] with the loss decay
};

// input_ids, loss_mask i32 [B, S]; anchors, keep i32 [B, N].
DFlashPrepared dflash_prepare(const Tensor& input_ids, const Tensor& loss_mask, const Tensor& anchors,
                              const Tensor& keep, int64_t block_size, int64_t mask_token_id, double gamma);

// f32 [7]: sum lw*ce, sum lw, hits, sum w, sum tau_block over kept blocks, kept blocks, weighted
// slots (kernels::cpu::dflash_metrics).
Tensor dflash_metrics(const Tensor& ce, const Tensor& argmax, const DFlashPrepared& p, const Tensor& keep,
                      int64_t block_size);

}  // namespace dflash

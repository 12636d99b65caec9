// The control ops of continuous batching over fixed slots (`dflash-train generate`): small kernels
// that move the slot state (i32 [S, kGenerateSlotFields] on the device; its fields are
// kernels::cpu::generate_slot) between a recorded program's passes, so that a decode step or a
// prefill chunk never waits for the host. No gradients.
#pragma once
#include <cstdint>

#include "kernels/cpu/generate_kernels.h"
#include "runtime/tensor.h"

namespace dflash::generate {

namespace slot_field = kernels::cpu::generate_slot;
using kernels::cpu::kGenerateSlotFields;

// The decode step's inputs: ids i32 [S] (each active slot's token, 0 elsewhere) and pos i32 [S]
// (each active slot's length, -1 elsewhere: padding).
struct StepRows {
  Tensor ids, pos;
};
StepRows step_rows(const Tensor& state);

// A prefill chunk's entries (rows i32 [m]: the chunk rows that end a prompt, -1 for none; slot and
// pos i32 [P]: every chunk row's slot and position) -> entry_slot, entry_pos i32 [m] (-1 for none).
struct Entries {
  Tensor slot, pos;
};
Entries entries(const Tensor& rows, const Tensor& slot, const Tensor& pos);

// tokens i32 [m]: entry e's token drawn from probs row e (f32 [m, V]) with its slot's random stream
// at position pos + 1; -1 for an entry without a slot.
Tensor sample(const Tensor& state, const Tensor& probs, const Entries& e);

// For every entry with a slot: its token = chosen, length = pos + 1, active; result i32 [m] =
// chosen there, -1 elsewhere.
void commit(const Tensor& state, const Entries& e, const Tensor& chosen, const Tensor& result);

}  // namespace dflash::generate

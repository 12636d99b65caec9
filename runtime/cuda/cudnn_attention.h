// The target's causal attention on cuDNN, per context: a cuDNN handle and, per shape, a plan with
// its own workspace. A shape's plan is built at its first call outside capture (eager mode, or the
// planning pass that precedes every recording), run once eagerly and once inside a trial capture,
// and then serves eager calls and recordings alike, so both run the same plan bit for bit. A shape
// cuDNN cannot run is served by dflash's kernel from then on, after one line on stderr.
#pragma once
#include <string>

#include "kernels/cuda/cuda_kernels.h"
#include "runtime/context.h"

namespace dflash::cudnn_attention {

// Whether this call runs on cuDNN: bf16, every pointer 16-byte aligned, cuDNN asked for
// (target_attention()) and able to run the shape. The first call in a process says on stderr which
// implementation runs. Throws, naming the fix, when the shape's plan is missing while a program is
// being recorded. (A sealed runtime never gets here with a new shape: its output allocation fails.)
bool use(Context& ctx, const kernels::cuda::CausalAttentionArgs& a);

// Enqueues the call on cuDNN on `stream`; use(ctx, a) said true for the same arguments.
void forward(Context& ctx, const kernels::cuda::CausalAttentionArgs& a, void* stream);

// "cuDNN 9.14.0 (headers 9.14.0), cudnn-frontend 1.32.0", or that the build has no cuDNN path.
std::string versions();

}  // namespace dflash::cudnn_attention

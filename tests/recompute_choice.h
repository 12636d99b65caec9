// For the drafter tests on either device: one step recorded and replayed as training runs it,
// recomputing as a given choice says; its loss, then every gradient (the flat store's order).
#pragma once
#include <vector>

#include "graphs/engine.h"
#include "graphs/program.h"
#include "model/drafter.h"
#include "runtime/autograd.h"

namespace dflash::test {

inline std::vector<float> recorded_loss_and_grads(Context& ctx, Drafter& d, const DrafterInputs& in, Recompute r) {
  Tensor loss = Tensor::persistent({1}, DType::f32);
  auto body = [&] {
    DrafterOutputs o = d.forward(in, r, 16);
    backward(o.loss);
    ops::copy_(loss, o.loss);
  };
  ctx.reserve_arena(plan_program(ctx, "choice", body).arena_bytes);
  record_program(ctx, "choice", body).replay();
  ctx.synchronize();
  std::vector<float> all = loss.to_floats();
  const std::vector<float> grads = d.params().flat_grads().to_floats();
  all.insert(all.end(), grads.begin(), grads.end());
  return all;
}

}  // namespace dflash::test

// UpdateStep: the kernel calls of one optimizer step.
#include "graphs/update.h"

namespace dflash {

UpdateStep::UpdateStep(AdamWOptimizer& optimizer, const ParameterStore& params, Communicator* comm, int rank,
                       int micro_batches)
    : optimizer_(optimizer), params_(params), comm_(comm), rank_(rank) {
  DF_CHECK(micro_batches >= 1, "training.grad_accum = " << micro_batches << ": it must be at least 1");
  int world = comm ? comm->world() : 1;
  grad_scale_ = 1.0f / float(micro_batches * world);
  stats_ = io_.output("update", {2}, DType::f32);
}

void UpdateStep::body() const {
  all_reduce_(comm_, params_.flat_grads(), rank_);
  optimizer_.update(grad_scale_, stats_);
  io_.stage_out();
}

float UpdateStep::grad_norm() const { return io_.result("update").to_floats()[0]; }
void UpdateStep::read(float out[2]) const { io_.result("update").copy_to_host(out, 2 * sizeof(float)); }

float UpdateStep::lr() const { return io_.result("update").to_floats()[1]; }

}  // namespace dflash

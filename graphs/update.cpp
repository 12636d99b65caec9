// UpdateStep: the kernel calls of one optimizer step.
#include "graphs/update.h"

namespace dflash {

UpdateStep::UpdateStep(AdamWOptimizer& optimizer, const ParameterStore& params, Communicator* comm, int rank,
                       int micro_batches)
    : UpdateStep(optimizer, params, UpdateOptions{comm, rank, micro_batches, 0, false}) {}

UpdateStep::UpdateStep(AdamWOptimizer& optimizer, const ParameterStore& params, const UpdateOptions& o)
    : optimizer_(optimizer), params_(params), opt_(o) {
  DF_CHECK(o.micro_batches >= 1, "training.grad_accum = " << o.micro_batches << ": it must be at least 1");
  world_ = o.comm ? o.comm->world() : 1;
  grad_scale_ = 1.0f / float(o.micro_batches * world_);
  stats_ = io_.output("update", {2}, DType::f32);
  if (o.record_bytes) {
    record_ = io_.input("record", {int64_t(o.record_bytes)}, DType::u8);
    records_ = io_.output("records", {int64_t(o.record_bytes) * world_}, DType::u8);
    record_host_ = static_cast<uint8_t*>(io_.staging("record").raw());
    records_host_ = static_cast<const uint8_t*>(io_.result("records").raw());
  }
  if (world_ > 1) distributed_.emplace(optimizer_, world_);
}

void UpdateStep::body() const {
  if (opt_.record_bytes) {
    io_.stage_in();
    all_gather_(opt_.comm, record_, records_, opt_.rank);
  }
  if (distributed_) distributed_->update(grad_scale_, stats_, opt_.comm, opt_.rank, opt_.grads_reduced);
  else optimizer_.update(grad_scale_, stats_);
  io_.stage_out();
}

uint8_t* UpdateStep::record() const { return record_host_; }
const uint8_t* UpdateStep::records() const { return records_host_; }

float UpdateStep::grad_norm() const { return io_.result("update").to_floats()[0]; }
void UpdateStep::read(float out[2]) const { io_.result("update").copy_to_host(out, 2 * sizeof(float)); }

float UpdateStep::lr() const { return io_.result("update").to_floats()[1]; }

}  // namespace dflash

// checkpoint(): a tape node whose backward re-runs its segment under a nested tape.
#include "graphs/checkpoint.h"

#include <unordered_map>

#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/context.h"
#include "runtime/ops/common.h"
#include "runtime/profile.h"

namespace dflash {

namespace {
// Swaps in a nested tape and turns grad mode on for the recomputation; restores both.
class NestedTape {
 public:
  explicit NestedTape(Context& ctx) : ctx_(ctx), outer_(ctx.swap_tape(&tape_)), grad_(ctx.grad_enabled()) {
    ctx.set_grad_enabled(true);
  }
  ~NestedTape() {
    ctx_.swap_tape(outer_);
    ctx_.set_grad_enabled(grad_);
  }

 private:
  Context& ctx_;
  Tape tape_;
  Tape* outer_;
  bool grad_;
};
}  // namespace

void CheckpointStash::put(std::vector<Tensor> tensors) {
  if (!active_) return;
  DF_CHECK(!replaying_, "checkpoint stash: put() during the recomputation; the segment must put() in its first "
                        "run and take() in the recomputation");
  kept_.push_back(std::move(tensors));
}

std::vector<Tensor> CheckpointStash::take() {
  DF_CHECK(active_ && replaying_ && next_ < kept_.size(),
           "checkpoint stash: take() without a matching put() in the first run (" << kept_.size()
                                                                                   << " kept); the segment must be pure");
  return std::move(kept_[next_++]);
}

void adopt_kept_values(const Tensor& skipped, const Tensor& kept) {
  DF_CHECK(skipped.shape() == kept.shape() && skipped.dtype() == kept.dtype(),
           "checkpoint stash: the kept " << kept.describe() << " cannot stand in for the recomputed "
                                         << skipped.describe() << "; the segment must keep what it recomputes");
  DF_CHECK(skipped.impl().storage->data == nullptr && skipped.impl().storage.use_count() == 1,
           "checkpoint stash: " << skipped.describe() << " has memory or views of its own; only the output of "
                                   "an op run under SkipLaunches, before any view of it, can take kept values");
  skipped.impl().storage = kept.impl().storage;
  skipped.impl().offset = kept.impl().offset;
}

std::vector<Tensor> checkpoint(const char* name, const Segment& segment, const std::vector<Tensor>& inputs) {
  return checkpoint_with_stash(
      name, [segment](const std::vector<Tensor>& x, CheckpointStash&) { return segment(x); }, inputs);
}

std::vector<Tensor> checkpoint_with_stash(const char* name, const StashedSegment& segment,
                                          const std::vector<Tensor>& inputs) {
  Context& ctx = Context::current();
  if (!ctx.grad_enabled()) {
    CheckpointStash inactive;
    return segment(inputs, inactive);
  }
  auto stash = std::make_shared<CheckpointStash>();
  stash->active_ = true;
  std::vector<Tensor> outputs;
  {
    NoGrad no_grad;
    outputs = segment(inputs, *stash);
  }
  std::vector<Tensor*> out_ptrs;
  for (Tensor& t : outputs) {
    // An output that is one of the inputs gets its own handle, so marking it leaves the input alone.
    for (const Tensor& x : inputs)
      if (t.impl_ptr() == x.impl_ptr()) t = ops::detail::view_of(x, x.shape());
    out_ptrs.push_back(&t);
  }
  size_t n_out = outputs.size();
  record_node(name, out_ptrs, [name, segment, inputs, n_out, stash](NodeGrads& g) {
    Context& c = Context::current();
    // Aliases of the inputs (same storage): the nested tape's leaves. Their gradients go
    // straight into the outer gradient buffers of the inputs.
    std::vector<Tensor> aliases;
    std::unordered_map<uint64_t, Tensor> preset;
    for (const Tensor& x : inputs) {
      Tensor a = ops::detail::view_of(x, x.shape());
      if (x.requires_grad()) {
        a.impl().requires_grad = true;
        a.impl().is_leaf = false;
        preset[a.id()] = g.in(x);
      }
      aliases.push_back(a);
    }
    std::vector<Tensor> grads;
    for (size_t i = 0; i < n_out; ++i) grads.push_back(g.out(i));
    NestedTape nested(c);
    std::vector<Tensor> again;
    {
      PhaseScope phase("recompute");
      stash->replaying_ = true;
      stash->next_ = 0;
      again = segment(aliases, *stash);
      DF_CHECK(stash->next_ == stash->kept_.size(),
               "checkpoint '" << name << "': the recomputation took " << stash->next_ << " of the "
                              << stash->kept_.size() << " kept results; the segment must be pure");
      stash->kept_.clear();  // the recorded backward nodes hold what they need
    }
    DF_CHECK(again.size() == n_out, "checkpoint: the segment returned " << again.size() << " outputs when "
                                                                        << "recomputed but " << n_out
                                                                        << " the first time; it must be pure");
    // Backward needs the outputs' identities, never their values (the outer graph holds those):
    // their storage goes back to the arena before the backward's temporaries are made. An output
    // that is an input's alias keeps its id, so run_backward adds its gradient into the preset buffer.
    for (Tensor& t : again) {
      t.impl().generation = c.tape().generation();
      t = ops::detail::grad_key(t);
    }
    run_backward(again, grads, preset);
  });
  return outputs;
}

}  // namespace dflash

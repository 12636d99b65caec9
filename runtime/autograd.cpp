// The tape's backward pass: reverse order, gradients accumulated, activations freed as soon as
// their node has run.
#include "runtime/autograd.h"

#include "runtime/context.h"
#include "runtime/ops.h"
#include "runtime/ops/common.h"
#include "runtime/profile.h"

namespace dflash {

Tensor NodeGrads::out(size_t i) const {
  DF_CHECK(i < node_.outputs.size(), "node '" << node_.op << "' asked for the gradient of output " << i
                                              << " of " << node_.outputs.size());
  auto it = grads_.find(node_.outputs[i]);
  return it == grads_.end() ? Tensor() : it->second;
}

Tensor NodeGrads::in(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {};
  if (t.is_leaf()) {
    DF_CHECK(t.grad().defined(), "leaf " << t.describe() << " requires grad but has no gradient buffer");
    if (FreshLeafGrads* f = Context::current().fresh_leaf_grads(); f && f->first_touch(t)) ops::fill_(t.grad(), 0.0f);
    return t.grad();
  }
  auto it = grads_.find(t.id());
  if (it != grads_.end()) return it->second;
  Tensor g = Tensor::zeros(t.shape(), grad_dtype(t));
  grads_.emplace(t.id(), g);
  return g;
}

std::pair<Tensor, bool> NodeGrads::in_overwritable(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return {Tensor(), false};
  if (t.is_leaf()) {
    FreshLeafGrads* f = Context::current().fresh_leaf_grads();
    if (f && t.grad().defined() && f->first_touch(t)) return {t.grad(), true};
    return {in(t), false};
  }
  if (grads_.count(t.id())) return {in(t), false};
  Tensor g = Tensor::empty(t.shape(), grad_dtype(t));
  grads_.emplace(t.id(), g);
  return {g, true};
}

std::pair<Tensor, bool> NodeGrads::in_overwritable(const Tensor& t, const Tensor& donor) {
  if (!t.defined() || !t.requires_grad()) return {Tensor(), false};
  if (t.is_leaf()) return in_overwritable(t);
  if (grads_.count(t.id())) return {in(t), false};
  const bool dead = donor.defined() && donor.impl_ptr().use_count() == 1 && donor.impl().storage.use_count() == 1 &&
                    donor.impl().storage->data != nullptr && donor.shape() == t.shape() &&
                    donor.dtype() == grad_dtype(t);
  if (!dead) return in_overwritable(t);
  Tensor g = ops::detail::view_of(donor, donor.shape());
  grads_.emplace(t.id(), g);
  return {g, true};
}

bool NodeGrads::adopt(const Tensor& t, const Tensor& grad) {
  if (!t.defined() || !t.requires_grad() || t.is_leaf() || !grad.defined() || grads_.count(t.id())) return false;
  if (grad.dtype() != grad_dtype(t) || grad.shape() != t.shape()) return false;
  grads_.emplace(t.id(), grad);
  return true;
}

void NodeGrads::pass(const Tensor& t, const Tensor& grad) {
  if (!t.defined() || !t.requires_grad() || !grad.defined()) return;
  DF_CHECK(grad.shape() == t.shape(), "pass: gradient " << grad.describe() << " for " << t.describe());
  if (!adopt(t, grad)) ops::accumulate_(in(t), grad);
}

Tensor grad_hook(const Tensor& t, std::function<void()> hook) {
  if (!needs_grad({&t})) return t;
  auto impl = std::make_shared<TensorImpl>(t.impl());  // the same storage under a new id
  impl->id = next_tensor_id();
  Tensor out(std::move(impl));
  Tensor in = t;
  record_node("grad_hook", {&out}, [in, hook](NodeGrads& g) {
    g.pass(in, g.out(0));
    hook();
  });
  return out;
}

bool needs_grad(std::initializer_list<const Tensor*> inputs) {
  if (!Context::current().grad_enabled()) return false;
  for (const Tensor* t : inputs)
    if (t && t->defined() && t->requires_grad()) return true;
  return false;
}

void record_node(const char* op, std::initializer_list<Tensor*> outputs, std::function<void(NodeGrads&)> backward) {
  record_node(op, std::vector<Tensor*>(outputs), std::move(backward));
}

void record_node(const char* op, const std::vector<Tensor*>& outputs, std::function<void(NodeGrads&)> backward) {
  Context& ctx = Context::current();
  Node n;
  n.op = op;
  for (Tensor* t : outputs) {
    TensorImpl& impl = t->impl();
    impl.requires_grad = true;
    impl.is_leaf = false;
    impl.generation = ctx.tape().generation();
    n.outputs.push_back(impl.id);
  }
  n.backward = std::move(backward);
  ctx.tape().push(std::move(n));
}

DType grad_dtype(const Tensor& t) { return t.is_leaf() ? DType::f32 : t.dtype(); }

void backward(const Tensor& loss) {
  Context& ctx = Context::current();
  OpScope scope("backward");
  DF_CHECK(loss.defined(), "backward: the loss is undefined");
  DF_CHECK(loss.numel() == 1, "backward: the loss is " << loss.describe()
                                                       << "; backward starts from a one-element tensor (reduce it first)");
  DF_CHECK(loss.requires_grad() && !loss.is_leaf(),
           "backward: " << loss.describe() << " does not require grad: every input was frozen or it was "
                        << "computed under NoGrad, so there is nothing to differentiate");
  DF_CHECK(loss.impl().generation == ctx.tape().generation() && ctx.tape().size() > 0,
           "backward called twice without a new forward: the first call consumed the tape that made "
               << loss.describe() << ". Run the forward again before the next backward");
  Tensor seed = Tensor::empty(loss.shape(), grad_dtype(loss));
  ops::fill_(seed, 1.0f);
  run_backward({loss}, {seed});
}

void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                  const std::unordered_map<uint64_t, Tensor>& preset) {
  Context& ctx = Context::current();
  Tape& tape = ctx.tape();
  DF_CHECK(outputs.size() == grads.size(), "run_backward: " << outputs.size() << " outputs but "
                                                            << grads.size() << " gradients");
  std::unordered_map<uint64_t, Tensor> g = preset;
  NoGrad no_grad;
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (!grads[i].defined() || !outputs[i].requires_grad()) continue;
    DF_CHECK(grads[i].shape() == outputs[i].shape(), "run_backward: gradient " << grads[i].describe()
                                                                               << " for " << outputs[i].describe());
    // An output whose gradient buffer is preset (a checkpoint input returned as it came) adds into
    // it: replacing the buffer would lose every other path's gradient to that input.
    if (preset.count(outputs[i].id())) ops::accumulate_(g.at(outputs[i].id()), grads[i]);
    else g[outputs[i].id()] = grads[i];
  }
  PhaseScope phase("backward");
  auto& nodes = tape.nodes_;
  while (!nodes.empty()) {
    Node& n = nodes.back();
    bool reached = false;
    for (uint64_t id : n.outputs) reached = reached || g.count(id);
    if (reached) {
      OpScope scope(n.op);
      NodeGrads ng(g, n);
      n.backward(ng);
      for (uint64_t id : n.outputs) g.erase(id);
    }
    nodes.pop_back();  // frees what the node saved for backward
  }
  tape.clear();
}

FreshLeafGrads::FreshLeafGrads(std::vector<Tensor> leaves) : leaves_(std::move(leaves)) {
  Context& c = Context::current();
  DF_CHECK(!c.fresh_leaf_grads(), "FreshLeafGrads scopes do not nest: one step's gradients are fresh once");
  for (const Tensor& l : leaves_) {
    DF_CHECK(l.is_leaf() && l.grad().defined(), "FreshLeafGrads: " << l.describe() << " is not a leaf with a gradient buffer");
    ids_.insert(l.id());
  }
  c.swap_fresh_leaf_grads(this);
}

FreshLeafGrads::~FreshLeafGrads() {
  Context& c = Context::current();
  if (c.fresh_leaf_grads() == this) c.swap_fresh_leaf_grads(nullptr);
}

bool FreshLeafGrads::first_touch(const Tensor& leaf) {
  return ids_.count(leaf.id()) != 0 && touched_.insert(leaf.id()).second;
}

void FreshLeafGrads::finish() {
  Context::current().swap_fresh_leaf_grads(nullptr);
  for (const Tensor& l : leaves_)
    if (touched_.insert(l.id()).second) ops::fill_(l.grad(), 0.0f);
}

NoGrad::NoGrad() : previous_(Context::current().grad_enabled()) { Context::current().set_grad_enabled(false); }
NoGrad::~NoGrad() { Context::current().set_grad_enabled(previous_); }

}  // namespace dflash

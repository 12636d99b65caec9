// Autograd: a tape of nodes in forward order; backward runs them in reverse. Gradients
// accumulate (+=) into each leaf's gradient buffer. Frozen tensors and no-grad scopes record
// nothing. A tape is consumed by backward: a second backward needs a new forward.
#pragma once
#include <functional>
#include <utility>
#include <initializer_list>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "runtime/tensor.h"

namespace dflash {

class NodeGrads;

struct Node {
  const char* op = "";
  std::vector<uint64_t> outputs;  // ids of the tensors this node produced
  std::function<void(NodeGrads&)> backward;
};

class Tape {
 public:
  void push(Node node) { nodes_.push_back(std::move(node)); }
  size_t size() const { return nodes_.size(); }
  uint64_t generation() const { return generation_; }
  // Drops all nodes (and the activations they hold) and starts a new generation.
  void clear() {
    nodes_.clear();
    ++generation_;
  }

 private:
  friend void run_backward(const std::vector<Tensor>&, const std::vector<Tensor>&,
                           const std::unordered_map<uint64_t, Tensor>&);
  std::vector<Node> nodes_;
  uint64_t generation_ = 1;
};

// What a node's backward sees: the gradients flowing into its outputs, and the buffers its
// inputs' gradients accumulate into.
class NodeGrads {
 public:
  NodeGrads(std::unordered_map<uint64_t, Tensor>& grads, const Node& node) : grads_(grads), node_(node) {}
  // The gradient of output i; undefined when no gradient reached it.
  Tensor out(size_t i) const;
  // The buffer t's gradient accumulates into (+=): a leaf's own gradient buffer, or a
  // zero-filled temporary made on first use. Undefined when t needs no gradient.
  Tensor in(const Tensor& t);
  // For an op that writes every element of t's gradient: the buffer and whether it is fresh (made
  // now, not zeroed: the op must overwrite it, e.g. a GEMM with beta 0); otherwise the
  // accumulating buffer of in() and false.
  std::pair<Tensor, bool> in_overwritable(const Tensor& t);
  // The same for an elementwise op that reads each element of `donor` (an input it holds) before
  // writing that element of t's gradient: a fresh buffer takes donor's storage when nothing else
  // can read donor afterwards (this node holds the only handle on it and on its storage) and
  // shapes and dtypes agree. Saves one buffer of donor's size at the backward's peak.
  std::pair<Tensor, bool> in_overwritable(const Tensor& t, const Tensor& donor);
  // Makes `grad` itself t's gradient buffer when t (a non-leaf that requires grad) has none yet:
  // no copy, no zero fill. The caller must not write `grad` afterwards except through t's slot.
  // False (nothing done) otherwise.
  bool adopt(const Tensor& t, const Tensor& grad);
  // Hands `grad` on as t's gradient: adopted when nothing has reached t yet (see adopt), else added.
  void pass(const Tensor& t, const Tensor& grad);

 private:
  std::unordered_map<uint64_t, Tensor>& grads_;
  const Node& node_;
};

// True when grad mode is on and any of the tensors requires grad.
bool needs_grad(std::initializer_list<const Tensor*> inputs);
// Records a node; marks its outputs as requiring grad in this tape generation.
void record_node(const char* op, std::initializer_list<Tensor*> outputs, std::function<void(NodeGrads&)> backward);
void record_node(const char* op, const std::vector<Tensor*>& outputs, std::function<void(NodeGrads&)> backward);
// The gradient dtype of t: f32 for leaves (master gradients), t's own dtype otherwise.
DType grad_dtype(const Tensor& t);

// d(loss)/d(leaf) for every leaf that requires grad, accumulated into their gradient buffers.
// loss must be a one-element tensor produced in the current tape generation.
void backward(const Tensor& loss);
// Backward from several outputs with given gradients; `preset` maps tensor ids to gradient
// buffers to accumulate into instead of fresh ones (used by recompute checkpointing); an output
// whose id is preset has its gradient added into that buffer.
void run_backward(const std::vector<Tensor>& outputs, const std::vector<Tensor>& grads,
                  const std::unordered_map<uint64_t, Tensor>& preset = {});

// An identity on t whose backward hands t's gradient on unchanged (no copy) and then calls `hook`.
// The tape runs in reverse, so the hook runs once every node recorded after this one has run
// (e.g. the backward of the layer that reads the result). Records nothing when t needs no grad.
Tensor grad_hook(const Tensor& t, std::function<void()> hook);

// Within this scope the given leaves' gradient buffers hold nothing to keep (the optimizer left
// last step's values there): the first gradient that reaches a leaf overwrites its buffer (a GEMM
// with beta 0; an op that can only add zero-fills it first), later ones accumulate. finish()
// zero-fills the leaves no gradient reached, so that afterwards every leaf holds exactly the
// gradients of this scope, as if its buffer had been zeroed before. Saves the optimizer's zero
// pass over all gradients and the GEMMs' read of them. Scopes do not nest.
class FreshLeafGrads {
 public:
  explicit FreshLeafGrads(std::vector<Tensor> leaves);
  ~FreshLeafGrads();
  FreshLeafGrads(const FreshLeafGrads&) = delete;
  FreshLeafGrads& operator=(const FreshLeafGrads&) = delete;
  // True the first time it is asked about `leaf` (one of the scope's leaves), false afterwards.
  bool first_touch(const Tensor& leaf);
  void finish();

 private:
  std::vector<Tensor> leaves_;
  std::unordered_set<uint64_t> ids_, touched_;
};

// Within this scope nothing is recorded on the tape.
class NoGrad {
 public:
  NoGrad();
  ~NoGrad();

 private:
  bool previous_;
};

}  // namespace dflash

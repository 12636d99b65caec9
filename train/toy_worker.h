// One worker's toy-model replica (context, model, optimizer, bucket steps, update) run either
// recorded (graphs) or eagerly, plus a deterministic batch generator. Used by the runtime's
// tests, the GPU check and dflash-bench.
#pragma once
#include <memory>
#include <random>
#include <vector>

#include "graphs/engine.h"
#include "graphs/update.h"
#include "model/toy_lm.h"
#include "runtime/autograd.h"

namespace dflash {

struct ToyReplica {
  Context ctx;
  std::unique_ptr<ToyLM> model;
  std::unique_ptr<AdamWOptimizer> optimizer;
  std::vector<std::unique_ptr<ToyStep>> steps;
  std::unique_ptr<UpdateStep> update;
  std::unique_ptr<Engine> engine;
  bool graphs, checkpointing;

  ToyReplica(Device device, const ToyConfig& config, const std::vector<Bucket>& buckets, const OptimizerConfig& opt,
             bool graphs_, bool checkpointing_, Communicator* comm = nullptr, int rank = 0, int micro_batches = 1,
             bool build = true)
      : ctx(device, rank), graphs(graphs_), checkpointing(checkpointing_) {
    ContextScope scope(ctx);
    model = std::make_unique<ToyLM>(config);
    optimizer = std::make_unique<AdamWOptimizer>(model->params(), opt);
    for (const Bucket& b : buckets) steps.push_back(std::make_unique<ToyStep>(*model, b));
    update = std::make_unique<UpdateStep>(*optimizer, model->params(), comm, rank, micro_batches);
    if (graphs && build) build_programs(size_t(1) << 40);
  }

  void register_programs() {
    engine = std::make_unique<Engine>(ctx);
    for (auto& s : steps) {
      ToyStep* step = s.get();
      engine->add("train/" + std::to_string(step->bucket().seq), step->bucket(),
                  [step](bool ckpt) { step->train(ckpt); }, checkpointing);
    }
    UpdateStep* u = update.get();
    engine->add("update", Bucket{}, [u](bool) { u->body(); }, false);
  }

  void build_programs(size_t available) {
    ContextScope scope(ctx);
    register_programs();
    engine->build(available);
  }

  // One micro-batch on bucket i (already staged).
  void train(size_t i) {
    ContextScope scope(ctx);
    if (graphs) engine->program("train/" + std::to_string(steps[i]->bucket().seq)).replay();
    else steps[i]->train(checkpointing);
    ctx.synchronize();
  }
  void step_update() {
    ContextScope scope(ctx);
    if (graphs) engine->program("update").replay();
    else update->body();
    ctx.synchronize();
  }
  std::vector<float> params() {
    ContextScope scope(ctx);
    return model->params().flat_master().to_floats();
  }
  std::vector<float> grads() {
    ContextScope scope(ctx);
    return model->params().flat_grads().to_floats();
  }
};

// Sequences of a learnable toy language: t[i+1] = (5 t[i] + 3) mod V, with 10% random tokens.
inline std::vector<std::vector<int32_t>> toy_batch(uint64_t seed, int64_t count, int64_t min_len, int64_t max_len,
                                                   int64_t vocab) {
  std::mt19937_64 rng(seed);
  std::vector<std::vector<int32_t>> out;
  for (int64_t b = 0; b < count; ++b) {
    int64_t len = min_len + int64_t(rng() % uint64_t(max_len - min_len + 1));
    std::vector<int32_t> s(static_cast<size_t>(len));
    s[0] = int32_t(rng() % uint64_t(vocab));
    for (size_t i = 1; i < s.size(); ++i)
      s[i] = rng() % 10 == 0 ? int32_t(rng() % uint64_t(vocab)) : int32_t((5 * s[i - 1] + 3) % vocab);
    out.push_back(s);
  }
  return out;
}

}  // namespace dflash

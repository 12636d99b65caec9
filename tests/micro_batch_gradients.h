// For the trainer tests: the micro-batches a training config feeds its workers, in the documented
// order (the data plan's next micro-batch goes to rank 0's first slot, then its second, ..., then
// rank 1), each with its own gradient and figures at given weights, from one CPU worker replaying
// the same programs. Everything the trainer does after a micro-batch's gradient is left to the test.
#pragma once
#include <doctest/doctest.h>

#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "data/anchors.h"
#include "train/job.h"
#include "train/replica.h"

namespace dflash::test {

class MicroBatchGradients {
 public:
  struct Batch {
    int bucket = 0;
    HostBatch host;
    int64_t tokens = 0;  // real (unpadded) tokens
  };
  struct Result {
    std::vector<float> grad;  // flat, padded as the parameter store lays it out
    StepResult figures;
  };

  // The trainer's config; its dump folder is not touched (the replica lives in memory). `adjust`
  // may change the drafter's spec that the config gave, before the replica is made.
  explicit MicroBatchGradients(Config cfg, const std::function<void(DrafterSpec&)>& adjust = {})
      : cfg_(std::move(cfg)) {
    cfg_.job.dump_folder += "-reference";
    job_ = setup_job(cfg_, [](const std::string&) {});
    if (adjust) adjust(job_.drafter);
    data_ = open_train_data(job_, [](const std::string&) {});
    planner_ = std::make_unique<BatchPlanner>(data_->lengths(), cfg_.buckets,
                                              parse_overflow_policy(cfg_.data.overflow, "data.overflow"),
                                              cfg_.data.shuffle_seed, data_->source().string());
    ReplicaOptions o;
    o.device = Device::cpu();
    o.spec = job_.drafter;
    o.target_dir = cfg_.target.path;
    o.buckets = cfg_.buckets;
    o.online = true;
    o.train = true;
    o.eval = false;
    o.graphs = true;
    o.checkpointing = cfg_.training.checkpointing;
    o.grad_accum = 1;
    o.chunk_rows = cfg_.training.chunk_rows;
    replica_ = std::make_unique<Replica>(o);
    replica_->build(size_t(1) << 34);
  }

  const DrafterSpec& spec() const { return job_.drafter; }

  // The data plan's next micro-batch, staged as the trainer stages it (anchors from its own seed).
  Batch next() {
    MicroBatch mb = planner_->next();
    const Bucket& b = cfg_.buckets[size_t(mb.bucket)];
    Batch out;
    out.bucket = mb.bucket;
    out.host.resize(b, 0, false);
    std::vector<Sequence> seqs;
    for (int64_t i : mb.sequences) seqs.push_back(truncate_sequence(data_->get(i), b.seq));
    std::mt19937_64 rng(mb.anchor_seed(cfg_.job.seed));
    out.tokens = fill_batch(seqs, b, job_.drafter.block_size, rng,
                            {out.host.input_ids, out.host.loss_mask, out.host.anchors, out.host.keep});
    return out;
  }

  // The micro-batch's gradient and figures at the given f32 master weights (flat, padded).
  Result gradient(const std::vector<float>& master, const Batch& batch) {
    Replica& r = *replica_;
    const size_t b = size_t(batch.bucket);
    {
      ContextScope s(r.context());
      ParameterStore& p = r.drafter().params();
      REQUIRE(master.size() == size_t(p.padded_numel()));
      p.flat_master().copy_from_host(master.data(), master.size() * sizeof(float));
      p.sync_compute_copy();
      std::vector<float> zeros(master.size(), 0.0f);
      p.flat_grads().copy_from_host(zeros.data(), zeros.size() * sizeof(float));
      r.step(b).stage(batch.host);
    }
    r.run_target(b);
    r.run_train(b);
    ContextScope s(r.context());
    Result out;
    r.step(b).read_result(out.figures);
    out.grad = r.drafter().params().flat_grads().to_floats();
    return out;
  }

 private:
  Config cfg_;
  Job job_;
  std::unique_ptr<Dataset> data_;
  std::unique_ptr<BatchPlanner> planner_;
  std::unique_ptr<Replica> replica_;
};

}  // namespace dflash::test

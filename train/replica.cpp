// Replica: construction in its own context, program registration, and running.
#include "train/replica.h"

#include "model/target.h"

namespace dflash {

Replica::Replica(const ReplicaOptions& o) : opt_(o), ctx_(o.device, o.rank) {
  ContextScope scope(ctx_);
  int64_t max_seq = 0;
  for (const Bucket& b : o.buckets) max_seq = std::max(max_seq, b.seq);
  target_ = std::make_unique<Target>(o.target_dir, o.spec.target_layer_ids, max_seq);
  drafter_ = std::make_unique<Drafter>(o.spec, target_->embed_tokens(), target_->lm_head(), o.layout,
                                       /*random_init=*/false);
  drafter_->init_random(o.init_seed, o.init_std);
  if (o.train) {
    optimizer_ = std::make_unique<AdamWOptimizer>(drafter_->params(), o.optimizer);
    UpdateOptions u;
    u.comm = o.comm;
    u.rank = o.rank;
    u.micro_batches = int(o.grad_accum);
    u.record_bytes = o.record_bytes;
    if (o.overlap && o.comm && o.comm->world() > 1 && o.device.is_cuda()) {
      overlap_ = std::make_unique<OverlappedReduction>(
          o.comm, o.rank, drafter_->params(), reduction_plan_of(drafter_->params(), o.spec.num_hidden_layers),
          o.reduce_bf16);
      OverlappedReduction* ov = overlap_.get();
      drafter_->set_layer_backward_hook([ov](int64_t l, LayerGrads done) { ov->after_layer(l, done); });
      u.grads_reduced = true;
    }
    update_ = std::make_unique<UpdateStep>(*optimizer_, drafter_->params(), u);
  }
  // One micro-batch per step: its backward writes the gradients fresh, so the update need not
  // zero them. With several, every micro-batch adds to gradients the update zeroed.
  const bool fresh_grads = o.train && o.grad_accum == 1;
  if (optimizer_) optimizer_->set_zero_grads(!fresh_grads);
  for (const Bucket& b : o.buckets) {
    steps_.push_back(std::make_unique<BucketStep>(*drafter_, o.online ? target_.get() : nullptr, b, o.chunk_rows));
    steps_.back()->set_fresh_grads(fresh_grads);
    if (!o.online && o.eval) eval_steps_.push_back(std::make_unique<BucketStep>(*drafter_, target_.get(), b, o.chunk_rows));
  }
}

Replica::~Replica() {
  ContextScope scope(ctx_);
  engine_.reset();
  steps_.clear();
  eval_steps_.clear();
  update_.reset();
  overlap_.reset();
  optimizer_.reset();
  drafter_.reset();
  target_.reset();
}

void Replica::build(size_t available_bytes, const std::function<void(const std::string&)>& progress) {
  if (!opt_.graphs) return;
  ContextScope scope(ctx_);
  engine_ = std::make_unique<Engine>(ctx_);
  ctx_.set_gemm_tuning(opt_.gemm_tuning);
  for (size_t i = 0; i < steps_.size(); ++i) {
    BucketStep* step = steps_[i].get();
    BucketStep* eval = &eval_step(i);
    const Bucket& b = step->bucket();
    std::string seq = std::to_string(b.seq);
    if (step->online() && (opt_.train || opt_.features)) engine_->add("target/" + seq, b, [step](bool) { step->target_body(); }, false);
    OverlappedReduction* ov = overlap_.get();
    FittedBody plain = [step](Recompute r) { step->train_body_recomputing(r); };
    FittedBody reducing = [step, ov](Recompute r) {
      ov->arm();
      step->train_body_recomputing(r);
      ov->finish();
    };
    auto add_train = [&](const std::string& name, const FittedBody& body) {
      if (opt_.checkpointing)
        engine_->add_fitted(name, b, body, step->layers(), /*partial=*/true, step->partial_recompute_cost());
      else engine_->add(name, b, [body](bool) { body(Recompute{}); }, false);
    };
    if (opt_.train && (!ov || opt_.grad_accum > 1)) add_train("train/" + seq, plain);
    if (opt_.train && ov) add_train(opt_.grad_accum > 1 ? "train-last/" + seq : "train/" + seq, reducing);
    if (opt_.eval) engine_->add("eval/" + seq, b, [eval](bool) { eval->eval_body(); }, false);
  }
  if (opt_.train) {
    UpdateStep* u = update_.get();
    engine_->add("update", Bucket{}, [u](bool) { u->body(); }, false);
  }
  engine_->set_arena_budget(opt_.arena_budget);
  engine_->build(available_bytes, progress);
  for (auto& s : steps_) {
    std::string seq = std::to_string(s->bucket().seq);
    Programs p;
    if (engine_->has("target/" + seq)) p.target = &engine_->program("target/" + seq);
    if (engine_->has("train/" + seq)) p.train = &engine_->program("train/" + seq);
    p.train_last = engine_->has("train-last/" + seq) ? &engine_->program("train-last/" + seq) : p.train;
    if (engine_->has("eval/" + seq)) p.eval = &engine_->program("eval/" + seq);
    programs_.push_back(p);
  }
  if (engine_->has("update")) update_program_ = &engine_->program("update");
}

template <class Body>
void Replica::run(const Program* program, const Body& eager_body) {
  ContextScope scope(ctx_);
  if (opt_.graphs) {
    DF_CHECK(program, "no such program was recorded at startup (is this replica built for training and eval?)");
    program->replay();
  } else {
    eager_body();
  }
  ctx_.synchronize();
}

void Replica::run_target(size_t b) {
  BucketStep* s = steps_[b].get();
  run(opt_.graphs ? programs_[b].target : nullptr, [s] { s->target_body(); });
}

void Replica::run_train(size_t b, bool last) {
  BucketStep* s = steps_[b].get();
  bool ckpt = opt_.checkpointing;
  OverlappedReduction* ov = overlap_.get();
  // With overlap and one micro-batch per step, every micro-batch is the last.
  const bool reduce = ov && (last || opt_.grad_accum == 1);
  run(opt_.graphs ? (reduce ? programs_[b].train_last : programs_[b].train) : nullptr, [s, ckpt, ov, reduce] {
    if (reduce) ov->arm();
    s->train_body(ckpt);
    if (reduce) ov->finish();
  });
}

void Replica::run_eval(size_t b) {
  BucketStep* s = &eval_step(b);
  run(opt_.graphs ? programs_[b].eval : nullptr, [s] { s->eval_body(); });
}

void Replica::run_update() {
  UpdateStep* u = update_.get();
  run(update_program_, [u] { u->body(); });
}

}  // namespace dflash

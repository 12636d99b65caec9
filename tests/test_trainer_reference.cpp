// The trainer against an independent update: every step's logged grad_norm, lr, loss, accuracy,
// tau and tokens and every worker's weights after it equal a double-precision re-computation from
// docs/MODEL.md (tests/reference_update.h) of the step's k*W micro-batch gradients, each taken at the
// weights the trainer held before the step (tests/micro_batch_gradients.h). Several k and W; one
// config where eps = 1e-3 makes the gradient's scale show in the weights, one where clipping binds,
// one after a warm start. Every worker's weights are equal after the warm start and after each step.
#include <algorithm>
#include <cmath>
#include <tuple>

#include "tests/micro_batch_gradients.h"
#include "tests/reference_update.h"
#include "tests/trainer_fixture.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;

namespace {

// What one run showed: its step records and every worker's weights after 0, 1, ..., steps steps.
struct Watched {
  std::vector<nlohmann::json> records;
  std::vector<std::vector<ReplicaWeights>> weights;
};

Watched train_and_watch(const Config& cfg) {
  Watched run;
  TrainHooks hooks;
  hooks.weights = [&run](int64_t steps_done, const std::vector<ReplicaWeights>& workers) {
    REQUIRE(size_t(steps_done) == run.weights.size());
    run.weights.push_back(workers);
  };
  TrainResult r = run_training(cfg, hooks);
  REQUIRE(r.steps_done == cfg.training.steps);
  run.records = step_records(cfg.job.dump_folder);
  return run;
}

reference::Hyper hyper_of(const Config& c) {
  const TrainingConfig& t = c.training;
  return {t.lr, t.min_lr_ratio, t.warmup_ratio, t.beta1, t.beta2, t.eps, t.weight_decay, t.max_grad_norm, t.steps};
}

double number(const nlohmann::json& record, const char* key) { return record.at(key).get<double>(); }

double relative(double got, double want) { return std::abs(got - want) / std::max(std::abs(want), 1e-30); }

// A config of the shared small job: k micro-batches on each of W CPU workers, six steps of which
// the first two warm up (round(0.34 * 6) = 2), cosine to 0.2 lr at step 6, no eval set.
Config reference_job(const std::string& dump, int64_t k, int64_t W, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"training.steps=6",        "training.grad_accum=" + std::to_string(k),
                                "runtime.cpu_workers=" + std::to_string(W),
                                "training.lr=0.01",        "training.weight_decay=0.1",
                                "training.warmup_ratio=0.34", "training.min_lr_ratio=0.2",
                                "data.eval=\"\""};
  o.insert(o.end(), more.begin(), more.end());
  return small_job(dump, o, 6);
}

// Every worker holds exactly rank 0's weights, master and compute copy, after every step.
void check_workers_equal(const Watched& run) {
  for (size_t s = 0; s < run.weights.size(); ++s)
    for (size_t w = 1; w < run.weights[s].size(); ++w) {
      CAPTURE(s);
      CAPTURE(w);
      CHECK(run.weights[s][w].master == run.weights[s][0].master);
      CHECK(run.weights[s][w].compute == run.weights[s][0].compute);
    }
}

// Each step of `run` against the reference; returns, per step, the clip factor the reference applied.
std::vector<double> check_against_reference(const Config& cfg, const Watched& run) {
  const int64_t k = cfg.training.grad_accum, W = cfg.runtime.cpu_workers, steps = cfg.training.steps;
  REQUIRE(run.records.size() == size_t(steps));
  REQUIRE(run.weights.size() == size_t(steps + 1));
  MicroBatchGradients micro(cfg);
  const reference::Hyper h = hyper_of(cfg);
  reference::State state;
  std::vector<double> clips;
  for (int64_t s = 1; s <= steps; ++s) {
    CAPTURE(s);
    const std::vector<float>& before = run.weights[size_t(s - 1)][0].master;
    // The k*W micro-batches of the step, in the order the documented sums take them.
    std::vector<std::vector<float>> grads;
    double loss = 0, accuracy = 0, tau = 0, tau_batches = 0;
    int64_t tokens = 0;
    for (int64_t j = 0; j < k * W; ++j) {
      MicroBatchGradients::Batch batch = micro.next();
      MicroBatchGradients::Result r = micro.gradient(before, batch);
      grads.push_back(std::move(r.grad));
      loss += r.figures.loss;
      accuracy += r.figures.accuracy();
      if (r.figures.sums[5] > 0) tau += r.figures.tau(), tau_batches += 1;  // micro-batches with a kept block
      tokens += batch.tokens;
    }
    const reference::Outcome want = reference::step(h, state, before, grads, s);
    clips.push_back(want.clip);
    const nlohmann::json& rec = run.records[size_t(s - 1)];
    CHECK(rec.at("step").get<int64_t>() == s);
    CHECK(relative(number(rec, "grad_norm"), want.grad_norm) <= 1e-6);
    CHECK(relative(number(rec, "lr"), want.lr) <= 1e-6);
    // The logged figures are the means over the k*W micro-batches (tau: over those with a kept
    // block), summed in the same order, so they agree to the last bits; tokens is their sum.
    CHECK(relative(number(rec, "loss"), loss / double(k * W)) <= 1e-12);
    CHECK(relative(number(rec, "accuracy"), accuracy / double(k * W)) <= 1e-12);
    CHECK(relative(number(rec, "tau"), tau_batches > 0 ? tau / tau_batches : 0.0) <= 1e-12);
    CHECK(rec.at("tokens").get<int64_t>() == tokens);
    // Weights: the f32 trainer may differ from the double reference by rounding only: 1e-6 of the
    // value plus 1e-3 of the step's lr (a wrong gradient scale, clip or lr moves them by ~0.1 lr).
    const std::vector<float>& after = run.weights[size_t(s)][0].master;
    REQUIRE(after.size() == want.params.size());
    double worst = 0;
    size_t worst_i = 0;
    for (size_t i = 0; i < after.size(); ++i) {
      double excess = (std::abs(double(after[i]) - want.params[i]) - 1e-6 * std::abs(want.params[i])) / want.lr;
      if (excess > worst) worst = excess, worst_i = i;
    }
    CAPTURE(worst_i);
    CAPTURE(after[worst_i]);
    CAPTURE(want.params[worst_i]);
    CHECK(worst <= 1e-3);
  }
  return clips;
}

}  // namespace

TEST_SUITE("trainer-reference") {
  TEST_CASE("each step equals an independent double-precision update (eps 1e-3; k, W = 1, 1 / 3, 1 / 1, 2)") {
    // Clipping off (max_grad_norm 0) in the first run; on but never binding (norms stay under 10)
    // in the others, where a clip that scaled the gradient anyway would show through eps.
    for (auto [k, W, clip] : {std::tuple<int64_t, int64_t, int>{1, 1, 0}, {3, 1, 10}, {1, 2, 10}}) {
      CAPTURE(k);
      CAPTURE(W);
      Config cfg = reference_job("reference-eps-" + std::to_string(k) + "-" + std::to_string(W), k, W,
                                 {"training.eps=0.001", "training.max_grad_norm=" + std::to_string(clip)});
      Watched run = train_and_watch(cfg);
      check_workers_equal(run);
      for (double c : check_against_reference(cfg, run)) CHECK(c == 1.0);  // the premise: no clipping
    }
  }

  TEST_CASE("where clipping binds, each step equals the reference (k, W = 2, 1 / 1, 3)") {
    for (auto [k, W] : {std::pair<int64_t, int64_t>{2, 1}, {1, 3}}) {
      CAPTURE(k);
      CAPTURE(W);
      Config cfg = reference_job("reference-clip-" + std::to_string(k) + "-" + std::to_string(W), k, W,
                                 {"training.max_grad_norm=0.3", "training.eps=1e-6"});
      Watched run = train_and_watch(cfg);
      check_workers_equal(run);
      std::vector<double> clips = check_against_reference(cfg, run);
      for (double c : clips) CHECK(c < 0.9);  // the premise: clipping bound at every step
    }
  }

  TEST_CASE("a warm start reaches every worker, and each step after it equals the reference (k 2, W 2)") {
    Config source = reference_job("reference-warm-source", 1, 1, {"training.steps=2"});
    Watched first = train_and_watch(source);
    const std::vector<float>& saved = first.weights.back()[0].master;
    Config cfg = reference_job("reference-warm", 2, 2,
                               {"training.eps=0.001", "drafter.init=\"" +
                                                          (source.job.dump_folder / "checkpoints" / "step-2").string() + "\""});
    Watched run = train_and_watch(cfg);
    REQUIRE(run.weights[0].size() == 2);
    for (const ReplicaWeights& w : run.weights[0]) {
      CHECK(w.master == saved);
      CHECK(w.compute == saved);
    }
    check_workers_equal(run);
    check_against_reference(cfg, run);
  }
}

// The trainer on GPUs against references: two GPUs' first step equals one GPU accumulating the
// same two micro-batches, and both ranks hold equal weights (masters and bf16 compute copies)
// after a warm start and every step (suite "gpu2-trainer-reference"); the golden step's loss
// weights equal the CPU path's bit for bit and its argmax equals the golden one wherever the
// golden logits' top-2 margin exceeds 0.05 (suite "gpu-golden-checks"); runtime.gemm_tuning's table is
// saved, reused and checked (suite "gpu-gemm-tuning").
#ifdef DFLASH_CUDA
#include <cstring>

#include "model/drafter.h"
#include "runtime/fileio.h"
#include "runtime/gemm_tuning.h"
#include "runtime/safetensors.h"
#include "tests/gpu_test_util.h"
#include "tests/trainer_fixture.h"
#include "train/trainer.h"

using namespace dflash;
using namespace dflash::test;

namespace {
struct Watched {
  std::vector<nlohmann::json> records;
  std::vector<std::vector<ReplicaWeights>> weights;  // after 0, 1, ... steps
};

Watched train_and_watch(const Config& cfg) {
  Watched run;
  TrainHooks hooks;
  hooks.weights = [&run](int64_t, const std::vector<ReplicaWeights>& w) { run.weights.push_back(w); };
  run_training(cfg, hooks);
  run.records = step_records(cfg.job.dump_folder);
  return run;
}

// The compute copy is the master rounded to nearest even in bf16, element for element.
void check_compute_is_rounded_master(const ReplicaWeights& w) {
  REQUIRE(w.master.size() == w.compute.size());
  size_t bad = 0;
  for (size_t i = 0; i < w.master.size(); ++i)
    if (bf16_to_f32(f32_to_bf16(w.master[i])) != w.compute[i]) ++bad;
  CHECK(bad == 0);
}

// Three steps of the small job without warmup, lr 1e-2, eps 1e-3 (the update's sensitivity to a
// gradient difference is then at most lr / eps per unit), no eval set.
Config gpu_job(const std::string& dump, const std::string& devices, int64_t k, std::vector<std::string> more = {}) {
  std::vector<std::string> o = {"training.steps=3", "training.warmup_ratio=0", "training.lr=0.01", "training.eps=0.001",
                                "training.weight_decay=0.1", "data.eval=\"\"", "runtime.devices=" + devices,
                                "training.grad_accum=" + std::to_string(k)};
  o.insert(o.end(), more.begin(), more.end());
  return small_job(dump, o, 3);
}
}  // namespace

TEST_SUITE("gpu2-trainer-reference") {
  TEST_CASE("two GPUs: the first step equals one GPU accumulating the same micro-batches; ranks equal after a warm start") {
    if (cuda_backend::device_count() < 2) FAIL("needs a host with two GPUs");
    // One GPU with k = 2 and two GPUs with k = 1 see the same two micro-batches (the plan's first
    // goes to rank 0's first slot). Bounds: the figures of identical kernels on identical inputs
    // are equal (loss, accuracy, tau: relative 1e-6); the gradient sums differ only in f32
    // rounding order (NCCL's sum of two buffers vs accumulation in the backward), so grad_norm
    // agrees to relative 1e-5 and the masters after the step to 1e-3 lr + 1e-6 |p|.
    Config one = gpu_job("gpu-one-k2", "cuda:0", 2);
    Config two = gpu_job("gpu-two-k1", "cuda:0,1", 1);
    Watched a = train_and_watch(one), b = train_and_watch(two);
    REQUIRE(a.records.size() == 3);
    REQUIRE(b.records.size() == 3);
    REQUIRE(b.weights.size() == 4);
    for (const char* key : {"loss", "accuracy", "tau"})
      CHECK(b.records[0][key].get<double>() == doctest::Approx(a.records[0][key].get<double>()).epsilon(1e-6));
    CHECK(b.records[0]["grad_norm"].get<double>() == doctest::Approx(a.records[0]["grad_norm"].get<double>()).epsilon(1e-5));
    CHECK(b.records[0]["tokens"] == a.records[0]["tokens"]);
    const double lr = a.records[0]["lr"].get<double>();
    CHECK(b.records[0]["lr"].get<double>() == lr);
    const std::vector<float>&pa = a.weights[1][0].master, &pb = b.weights[1][0].master;
    REQUIRE(pa.size() == pb.size());
    double worst = 0;
    for (size_t i = 0; i < pa.size(); ++i)
      worst = std::max(worst, (std::abs(double(pa[i]) - pb[i]) - 1e-6 * std::abs(double(pa[i]))) / lr);
    MESSAGE("first step, two GPUs vs one GPU accumulating: worst master difference " << worst << " lr");
    CHECK(worst <= 1e-3);
    for (const auto& step : b.weights) {
      CHECK(step[1].master == step[0].master);
      CHECK(step[1].compute == step[0].compute);
      for (const ReplicaWeights& w : step) check_compute_is_rounded_master(w);
    }
    // A warm start from the one-GPU run's checkpoint reaches both ranks' masters and compute copies.
    Config warm = gpu_job("gpu-two-warm", "cuda:0,1", 1,
                          {"drafter.init=\"" + (one.job.dump_folder / "checkpoints" / "step-3").string() + "\""});
    Watched c = train_and_watch(warm);
    REQUIRE(c.weights.size() == 4);
    for (const ReplicaWeights& w : c.weights[0]) {
      CHECK(w.master == a.weights[3][0].master);
      check_compute_is_rounded_master(w);
    }
    for (const auto& step : c.weights) {
      CHECK(step[1].master == step[0].master);
      CHECK(step[1].compute == step[0].compute);
    }
  }
}

TEST_SUITE("gpu-golden-checks") {
  TEST_CASE("the golden step on the GPU: loss weights equal the CPU's bit for bit; argmax exact where the margin exceeds 0.05") {
    REQUIRE_GPU();
    SafeTensors target(golden_dir() / "target-qwen3" / "model.safetensors");
    SafeTensors init(golden_dir() / "drafter_init.safetensors");
    SafeTensors batch(golden_dir() / "batch.safetensors");
    SafeTensors expected(golden_dir() / "expected.safetensors");
    // One forward on a device: the loss weights and the argmax, [B * T] each.
    auto forward = [&](Device device, DType act) {
      Context ctx(device);
      ContextScope scope(ctx);
      Drafter d(golden_drafter_spec(), target.load("model.embed_tokens.weight", act), target.load("lm_head.weight", act));
      for (const ParamSpec& p : d.params().specs()) {
        std::vector<float> v = init.read_floats(p.name);
        d.params().master(p.name).copy_from_host(v.data(), v.size() * 4);
      }
      d.params().sync_compute_copy();
      DrafterInputs in{batch.load("input_ids", DType::i32), batch.load("loss_mask", DType::i32),
                       batch.load("anchors", DType::i32), batch.load("keep", DType::i32),
                       batch.load("target_hidden", act)};
      NoGrad no_grad;
      DrafterOutputs o = d.forward(in, false, 16);
      ctx.synchronize();
      return std::make_pair(o.prepared.lw.to_floats(), o.ce.argmax.to_ints());
    };
    auto [cpu_lw, cpu_argmax] = forward(Device::cpu(), DType::f32);
    auto [gpu_lw, gpu_argmax] = forward(Device::cuda(0), DType::bf16);
    REQUIRE(gpu_lw.size() == cpu_lw.size());
    CHECK(std::memcmp(gpu_lw.data(), cpu_lw.data(), cpu_lw.size() * sizeof(float)) == 0);
    // Argmax against the golden one where the float64 logits' top-2 margin exceeds 0.05 (bf16 noise
    // is far below that); positions closer to a tie are skipped.
    const std::vector<float> logits = expected.read_floats("logits");  // [B, T, V]
    const std::vector<int32_t> golden = expected.read_ints("argmax");  // [B, N, bs] = [B, T]
    const size_t V = logits.size() / golden.size();
    REQUIRE(gpu_argmax.size() == golden.size());
    size_t checked = 0;
    const size_t bs = size_t(golden_drafter_spec().block_size);
    for (size_t r = 0; r < golden.size(); ++r) {
      if (r % bs == 0) {  // slot 0 (weight 0) is not computed: argmax -1 on both devices
        CHECK(gpu_argmax[r] == -1);
        CHECK(cpu_argmax[r] == -1);
        continue;
      }
      const float* row = logits.data() + r * V;
      float best = -INFINITY, second = -INFINITY;
      for (size_t v = 0; v < V; ++v) {
        if (row[v] > best) second = best, best = row[v];
        else if (row[v] > second) second = row[v];
      }
      if (best - second <= 0.05f) continue;
      ++checked;
      CAPTURE(r);
      CHECK(gpu_argmax[r] == golden[r]);
      CHECK(cpu_argmax[r] == golden[r]);
    }
    MESSAGE("argmax checked at " << checked << " of " << golden.size() << " slots");
    CHECK(checked >= golden.size() / 3);
  }
}
TEST_SUITE("gpu-gemm-tuning") {
  TEST_CASE("runtime.gemm_tuning: the run saves its GEMM table, a later run reuses it, a bad table is refused by name") {
    REQUIRE_GPU();
    namespace fs = std::filesystem;
    const Config tuned = gpu_job("gpu-gemm-tuned", "cuda:0", 1, {"runtime.gemm_tuning=true", "checkpoint.resume=false"});
    const Config plain = gpu_job("gpu-gemm-plain", "cuda:0", 1, {"checkpoint.resume=false"});
    const Watched a = train_and_watch(tuned), b = train_and_watch(plain);
    const fs::path table = tuned.job.dump_folder / "gemm_table.txt";
    REQUIRE(fs::exists(table));
    CHECK_FALSE(fs::exists(plain.job.dump_folder / "gemm_table.txt"));
    const std::string text = read_file_text(table);
    const GemmTable parsed = GemmTable::parse(text, table.string());
    MESSAGE("the small job's GEMM table holds " << parsed.size() << " choices");
    // Other GEMM algorithms change only f32 rounding: the same losses within bf16 noise.
    const std::vector<double> la = losses(a.records), lb = losses(b.records);
    REQUIRE(la.size() == lb.size());
    for (size_t i = 0; i < la.size(); ++i) CHECK(la[i] == doctest::Approx(lb[i]).epsilon(2e-2));
    // A second run in the same folder starts from the saved table and keeps it as it was (a new run
    // there needs the old run's metrics.jsonl moved away).
    const fs::path records = tuned.job.dump_folder / "metrics.jsonl";
    fs::remove(records);
    train_and_watch(tuned);
    CHECK(read_file_text(table) == text);
    // A damaged table stops the run, naming the file and the fix.
    write_file_atomic(table, std::string("M=1 N=2 garbage\n"));
    fs::remove(records);
    CHECK_THROWS_WITH_AS(run_training(tuned), doctest::Contains((table.string() + ", line 1").c_str()), Error);
    fs::remove(records);
    CHECK_THROWS_WITH_AS(run_training(tuned), doctest::Contains("delete the file to tune the GEMMs again"), Error);
  }
}
#endif

// The GEMM table's text form (runtime/gemm_tuning.h): a round trip keeps every key and choice, and
// each malformed line gets an error naming the source, the line and the fix; the tuner's pick among
// timed candidates (kernels/cuda/gemm_candidates.h, plain C++).
#include "kernels/cuda/gemm_candidates.h"
#include "runtime/gemm_tuning.h"
#include "tests/test_util.h"

using namespace dflash;

TEST_SUITE("gemm-table") {
  TEST_CASE("the GEMM table's text form keeps every key and choice") {
    GemmTable t;
    const GemmKey a{8192, 4096, 12288, 12288, 12288, 4096, false, false, true, true, false};
    const GemmKey b{12288, 4096, 8192, 12288, 4096, 4096, true, false, true, false, true};
    const GemmKey c{3, 5, 7, 7, 7, 5, false, true, false, false, false};
    const GemmKey d{64, 32, 32, 64, 32, 32, true, false, true, false, false};
    t.set(a, GemmAlgoConfig{66, 29, 35, 1, 0, 0, 1, 0, 0});
    t.set(b, GemmAlgoConfig{66, 20, 35, 4, 2, 1, 3, 7, 2});
    t.set(c, GemmAlgoConfig{-1, 0, 0, 1, 4, 0, 0, 0, 0});
    t.set(d, kCublasDefault);
    const std::string text = t.to_text();
    CHECK(text.find("M=8192 N=4096 K=12288 lda=12288 ldb=12288 ldc=4096 NN bf16->bf16 beta=0 : 66 29 35 1 0 0 1 0 0") !=
          std::string::npos);
    CHECK(text.find("M=64 N=32 K=32 lda=64 ldb=32 ldc=32 TN bf16->f32 beta=0 : cublas\n") != std::string::npos);
    const GemmTable back = GemmTable::parse(text, "gemm_table.txt");
    REQUIRE(back.size() == 4);
    CHECK(is_cublas_default(*back.find(d)));
    CHECK_FALSE(is_cublas_default(*back.find(c)));
    for (const GemmKey& k : {a, b, c, d}) {
      REQUIRE(back.find(k));
      CHECK(*back.find(k) == *t.find(k));
    }
    CHECK(b.text() == "M=12288 N=4096 K=8192 lda=12288 ldb=4096 ldc=4096 TN bf16->f32 beta=1");
    CHECK_FALSE(back.find(GemmKey{8192, 4096, 12288, 12288, 12288, 4096, false, false, true, true, true}));  // beta differs
    CHECK(GemmTable::parse(text, "x").to_text() == text);  // sorted, so the text is stable
  }

  TEST_CASE("a malformed GEMM table line is refused with its file, line and the fix") {
    const std::string good = "M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : 1 2 3 4 5 6 7 8 9";
    CHECK(GemmTable::parse("# comment\n\n" + good + "\n", "t").size() == 1);
    for (const std::string& bad :
         {std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : 1 2 3 4 5 6 7 8"),  // 8 integers
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : 1 2 3 4 5 6 7 8 9 10"),
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 XT f32->f32 beta=0 : 1 2 3 4 5 6 7 8 9"),
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f16->f32 beta=0 : 1 2 3 4 5 6 7 8 9"),
          std::string("M=0 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : 1 2 3 4 5 6 7 8 9"),
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=2 : 1 2 3 4 5 6 7 8 9"),
          std::string("M=3 N=5 K=7 NT f32->f32 beta=0 : 1 2 3 4 5 6 7 8 9"),
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : cublas 1"),
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : cuBLAS"),
          std::string("M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 : -1 0 0 0 0 0 0 0 0")}) {
      INFO(bad);
      CHECK_THROWS_WITH_AS(GemmTable::parse(good + "\n" + bad + "\n", "run/gemm_table.txt"),
                           doctest::Contains(("run/gemm_table.txt, line 2: '" + bad + "' is not a GEMM table line").c_str()),
                           Error);
    }
    CHECK_THROWS_WITH_AS(GemmTable::parse(good + "\n" + good + "\n", "t"),
                         doctest::Contains("t, line 2: the shape M=3 N=5 K=7 lda=7 ldb=7 ldc=5 NT f32->f32 beta=0 has a "
                                           "choice already"),
                         Error);
    CHECK_THROWS_WITH_AS(GemmTable::parse(good.substr(0, 20), "t"), doctest::Contains("delete the file to tune the GEMMs again"),
                         Error);
  }

  TEST_CASE("the tuner's pick: the fastest candidate that agrees with cuBLAS; a refused one never, though untimed") {
    using kernels::cuda::GemmCandidate;
    auto cand = [](double ms, bool agrees) {
      GemmCandidate c;
      c.ms = ms;
      c.agrees = agrees;
      return c;
    };
    kernels::cuda::GemmCandidates t;
    CHECK(kernels::cuda::fastest_agreeing(t) == nullptr);
    // A refused candidate is never timed (ms 0): it must not win on time.
    t.candidates = {cand(0.90, true), cand(0.0, false), cand(0.70, true), cand(0.80, true), cand(0.0, false)};
    REQUIRE(kernels::cuda::fastest_agreeing(t) != nullptr);
    CHECK(kernels::cuda::fastest_agreeing(t) == &t.candidates[2]);
    // Equal times: the first in cuBLASLt's heuristic order.
    t.candidates = {cand(0.5, false), cand(0.6, true), cand(0.6, true)};
    CHECK(kernels::cuda::fastest_agreeing(t) == &t.candidates[1]);
    t.candidates = {cand(0.0, false), cand(0.3, false)};
    CHECK(kernels::cuda::fastest_agreeing(t) == nullptr);
  }
}

// The GEMM table's keys and text form (runtime/gemm_tuning.h).
#include "runtime/gemm_tuning.h"

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <iterator>
#include <sstream>

#include "runtime/error.h"

namespace dflash {

std::string GemmKey::text() const {
  char s[200];
  std::snprintf(s, sizeof s, "M=%lld N=%lld K=%lld lda=%lld ldb=%lld ldc=%lld %c%c %s->%s beta=%d", (long long)M,
                (long long)N, (long long)K, (long long)lda, (long long)ldb, (long long)ldc, ta ? 'T' : 'N',
                tb ? 'T' : 'N', ab_bf16 ? "bf16" : "f32", c_bf16 ? "bf16" : "f32", accumulate ? 1 : 0);
  return s;
}

size_t GemmKeyHash::operator()(const GemmKey& k) const {
  size_t h = 1469598103934665603ull;
  for (int64_t v : {k.M, k.N, k.K, k.lda, k.ldb, k.ldc,
                    int64_t(k.ta) | int64_t(k.tb) << 1 | int64_t(k.ab_bf16) << 2 | int64_t(k.c_bf16) << 3 |
                        int64_t(k.accumulate) << 4})
    h = (h ^ size_t(v)) * 1099511628211ull;
  return h;
}

std::string GemmTable::to_text() const {
  std::vector<std::string> lines;
  for (const auto& [k, c] : choices_) {
    std::string line = k.text() + " :";
    if (is_cublas_default(c)) line += " cublas";
    else
      for (int32_t v : c) line += " " + std::to_string(v);
    lines.push_back(line);
  }
  std::sort(lines.begin(), lines.end());
  std::string out = "# dflash GEMM table: <shape> : cuBLASLt algo id tile stages splitk reduction swizzle custom inner cluster, "
                    "or cublas (cublasGemmEx's own algorithm)\n";
  for (const std::string& l : lines) out += l + "\n";
  return out;
}

GemmTable GemmTable::parse(const std::string& text, const std::string& source) {
  GemmTable t;
  std::istringstream in(text);
  std::string line;
  int n = 0;
  while (std::getline(in, line)) {
    ++n;
    if (line.empty() || line[0] == '#') continue;
    GemmKey k;
    long long M, N, K, lda, ldb, ldc;
    char ta, tb;
    char ab[8] = {}, c[8] = {};
    int beta = -1, used = 0;
    GemmAlgoConfig cfg{};
    const int got = std::sscanf(line.c_str(), "M=%lld N=%lld K=%lld lda=%lld ldb=%lld ldc=%lld %c%c %4[bf16f32]->%4[bf16f32] beta=%d :%n",
                                &M, &N, &K, &lda, &ldb, &ldc, &ta, &tb, ab, c, &beta, &used);
    const std::string ab_s = ab, c_s = c;
    bool ok = got == 11 && used > 0 && M > 0 && N > 0 && K > 0 && (ta == 'N' || ta == 'T') &&
              (tb == 'N' || tb == 'T') && (ab_s == "bf16" || ab_s == "f32") && (c_s == "bf16" || c_s == "f32") &&
              (beta == 0 || beta == 1);
    if (ok) {  // after the colon: "cublas", or exactly 9 integers
      std::istringstream rest(line.substr(size_t(used)));
      const std::vector<std::string> words{std::istream_iterator<std::string>(rest), {}};
      if (words.size() == 1 && words[0] == "cublas") {
        cfg = kCublasDefault;
      } else {
        ok = words.size() == cfg.size();
        for (size_t i = 0; ok && i < cfg.size(); ++i) {
          const char *b = words[i].data(), *e = b + words[i].size();
          const auto [end, err] = std::from_chars(b, e, cfg[i]);
          ok = err == std::errc() && end == e;
        }
        ok = ok && !is_cublas_default(cfg);  // -1 0 ... 0 is written "cublas"
      }
    }
    DF_CHECK(ok, source << ", line " << n << ": '" << line
                        << "' is not a GEMM table line (\"M=.. N=.. K=.. lda=.. ldb=.. ldc=.. NT bf16->bf16 beta=0 : "
                           "<9 integers> or cublas\"); delete the file to tune the GEMMs again");
    k.M = M, k.N = N, k.K = K, k.lda = lda, k.ldb = ldb, k.ldc = ldc;
    k.ta = ta == 'T', k.tb = tb == 'T', k.ab_bf16 = ab_s == "bf16", k.c_bf16 = c_s == "bf16", k.accumulate = beta == 1;
    DF_CHECK(!t.find(k), source << ", line " << n << ": the shape " << k.text()
                                << " has a choice already; keep one line per shape");
    t.set(k, cfg);
  }
  return t;
}

}  // namespace dflash

// GEMM algorithm choices made at startup: for each GEMM shape of a context's programs, the
// cuBLASLt algorithm configuration that ran fastest when timed (runtime/cuda/gemm_tuner.cpp), or
// cublasGemmEx's own algorithm when none beat it, used by every launch of that shape, eager or
// recorded; shapes without an entry (tuning off) keep cublasGemmEx's own algorithm. Plain C++: the table, its keys and its text form.
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <unordered_map>
#include <vector>

namespace dflash {

// One GEMM launch as cuBLAS sees it: row-major C[M,N] (+)= op(A) op(B) with leading dimensions.
struct GemmKey {
  int64_t M = 0, N = 0, K = 0, lda = 0, ldb = 0, ldc = 0;
  bool ta = false, tb = false, ab_bf16 = false, c_bf16 = false, accumulate = false;  // accumulate: beta != 0
  bool operator==(const GemmKey&) const = default;
  std::string text() const;  // "M=8192 N=4096 K=4096 lda=4096 ldb=4096 ldc=4096 NT bf16->bf16 beta=0"
};
struct GemmKeyHash {
  size_t operator()(const GemmKey& k) const;
};

// A cuBLASLt algorithm: id, tile, stages, split-K, reduction scheme, CTA swizzling, custom option,
// inner shape, cluster shape (cublasLtMatmulAlgoConfigAttributes_t 0..8).
using GemmAlgoConfig = std::array<int32_t, 9>;
// The choice "cublasGemmEx's own algorithm" (written "cublas" in the text form): the shape was
// timed and no candidate beat it.
inline constexpr GemmAlgoConfig kCublasDefault{-1, 0, 0, 0, 0, 0, 0, 0, 0};
inline bool is_cublas_default(const GemmAlgoConfig& c) { return c == kCublasDefault; }

class GemmTable {
 public:
  const GemmAlgoConfig* find(const GemmKey& k) const {
    auto it = choices_.find(k);
    return it == choices_.end() ? nullptr : &it->second;
  }
  void set(const GemmKey& k, const GemmAlgoConfig& c) { choices_[k] = c; }
  void erase(const GemmKey& k) { choices_.erase(k); }
  size_t size() const { return choices_.size(); }
  // One line per choice, sorted: "<key text> : <9 integers>" or "<key text> : cublas"; parse()
  // reads it back and names `source` and the line in its errors.
  std::string to_text() const;
  static GemmTable parse(const std::string& text, const std::string& source);

 private:
  std::unordered_map<GemmKey, GemmAlgoConfig, GemmKeyHash> choices_;
};

}  // namespace dflash

// Shape of a tensor: up to 4 dimensions, row-major and contiguous.
#pragma once
#include <cstdint>
#include <initializer_list>
#include <string>
#include <vector>

#include "runtime/error.h"

namespace dflash {

struct Shape {
  static constexpr int kMaxDims = 4;
  int ndim = 0;
  int64_t d[kMaxDims] = {0, 0, 0, 0};

  Shape() = default;
  Shape(std::initializer_list<int64_t> dims) {
    DF_CHECK(dims.size() <= kMaxDims, "Shape: " << dims.size() << " dimensions given; tensors have at most 4");
    for (int64_t v : dims) {
      DF_CHECK(v >= 0, "Shape: negative dimension " << v);
      d[ndim++] = v;
    }
  }
  static Shape of(const std::vector<int64_t>& dims) {
    DF_CHECK(dims.size() <= kMaxDims, "Shape: " << dims.size() << " dimensions given; tensors have at most 4");
    Shape s;
    for (int64_t v : dims) {
      DF_CHECK(v >= 0, "Shape: negative dimension " << v);
      s.d[s.ndim++] = v;
    }
    return s;
  }

  int64_t operator[](int i) const {
    if (i < 0) i += ndim;
    DF_CHECK(i >= 0 && i < ndim, "Shape: dimension index " << i << " out of range for " << str());
    return d[i];
  }
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i)
      DF_CHECK(!__builtin_mul_overflow(n, d[i], &n),
               "Shape " << str() << ": more than 2^63 elements; fix: use smaller sizes (e.g. the bucket's batch or seq)");
    return n;
  }
  int64_t last() const { return ndim ? d[ndim - 1] : 1; }
  // Product of all dims but the last: the "rows" of a row-wise op.
  int64_t rows() const { return ndim ? numel() / (last() ? last() : 1) : 1; }
  std::vector<int64_t> vec() const { return std::vector<int64_t>(d, d + ndim); }

  bool operator==(const Shape& o) const {
    if (ndim != o.ndim) return false;
    for (int i = 0; i < ndim; ++i)
      if (d[i] != o.d[i]) return false;
    return true;
  }
  bool operator!=(const Shape& o) const { return !(*this == o); }

  std::string str() const {
    std::string s = "[";
    for (int i = 0; i < ndim; ++i) s += (i ? "," : "") + std::to_string(d[i]);
    return s + "]";
  }
};

}  // namespace dflash

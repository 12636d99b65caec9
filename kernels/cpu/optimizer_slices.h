// CPU kernels of the update over ranks (dist/optimizer_distributed.cpp): the squared-gradient
// sum of one slice, and the global norm from the slices' sums added in rank order.
#pragma once
#include <cstdint>

namespace dflash::kernels::cpu {

// out[0] = sum of g[i]^2 over [0, n), accumulated in double in index order.
void sum_squares(const float* g, int64_t n, double* out);
// norm[0] = sqrt(sums[0] + sums[1] + ... + sums[count - 1]) (double, in that order).
void norm_from_slice_sums(const double* sums, int count, float* norm);

}  // namespace dflash::kernels::cpu

// The slice sums and the norm over ranks; see optimizer_slices.h.
#include "kernels/cpu/optimizer_slices.h"

#include <cmath>

namespace dflash::kernels::cpu {

void sum_squares(const float* g, int64_t n, double* out) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += double(g[i]) * g[i];
  out[0] = s;
}

void norm_from_slice_sums(const double* sums, int count, float* norm) {
  double s = 0;
  for (int i = 0; i < count; ++i) s += sums[i];
  norm[0] = float(std::sqrt(s));
}

}  // namespace dflash::kernels::cpu

// embedding: row lookup in a [V, H] table by i32 ids; backward scatter-adds into the table's
// gradient when the table is trainable (it is usually the target's frozen embedding).
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"

namespace dflash::ops {
using namespace detail;

Tensor embedding(const Tensor& table, const Tensor& ids) {
  OpScope op("embedding");
  check_same_device("embedding", {&table, &ids});
  check_ndim("embedding", table, 2, "table");
  check_dtype("embedding", ids, DType::i32, "ids");
  DF_CHECK(ids.ndim() <= 3, "embedding: ids " << ids.describe() << " has " << ids.ndim()
                                              << " dims, but the output adds the hidden dim and tensors have at "
                                                 "most 4; reshape the ids to at most 3 dims");
  if (!on_cpu()) no_cuda_kernel("embedding");
  check_dtype("embedding", table, DType::f32, "table");

  int64_t n = ids.numel(), H = table.dim(1);
  Shape out_shape = ids.shape();
  out_shape.d[out_shape.ndim++] = H;
  Tensor out = Tensor::empty(out_shape, DType::f32);  // (..., H)
  const float* pt = f32(table);
  const int32_t* pi = i32(ids);
  float* po = f32(out);
  ctx().launch([=] { kernels::cpu::embedding_forward(pt, pi, po, n, H); });

  // ids carry no gradient, whatever their flag says.
  if (needs_grad({&table})) {
    record_node("embedding", {&out}, [table, ids, n, H](NodeGrads& g) {
      const float* dout = f32(g.out(0));
      float* dtable = f32(g.in(table));
      if (!dout || !dtable) return;
      const int32_t* pi = i32(ids);
      ctx().launch([=] { kernels::cpu::embedding_backward(pi, dout, dtable, n, H); });
    });
  }
  return out;
}

}  // namespace dflash::ops

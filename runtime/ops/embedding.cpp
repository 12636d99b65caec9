// embedding: row lookup in a [V, H] table by i32 ids; backward scatter-adds into the table's
// gradient when the table is trainable (it is usually the target's frozen embedding).
#include "kernels/cpu/cpu_kernels.h"
#include "runtime/ops/common.h"
#ifdef DFLASH_CUDA
#include "kernels/cuda/cuda_kernels.h"
#endif

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
  check_float_dtype("embedding", table, "table");

  int64_t n = ids.numel(), V = table.dim(0), H = table.dim(1);
  Shape out_shape = ids.shape();
  out_shape.d[out_shape.ndim++] = H;
  Tensor out = Tensor::empty(out_shape, table.dtype());  // (..., H)
  note_io({&ids, &out}, {&out});
  if (on_cpu()) {
    const float* pt = f32(table);
    const int32_t* pi = i32(ids);
    float* po = f32(out);
    ctx().launch([=] { kernels::cpu::embedding_forward(pt, pi, po, n, H); });
  } else {
#ifdef DFLASH_CUDA
    if (void* s = ctx().cuda_stream_for_launch())
      kernels::cuda::embedding_forward(table.raw(), i32(ids), out.raw(), size_t(H) * dtype_size(table.dtype()), n, s);
#endif
  }

  // ids carry no gradient, whatever their flag says.
  if (needs_grad({&table})) {
    record_node("embedding", {&out}, [table, ids, n, V, H](NodeGrads& g) {
      Tensor dout = g.out(0), dtable = g.in(table);
      if (!dout.defined() || !dtable.defined()) return;
      const int32_t* pi = i32(ids);
      note_io({&ids, &dout}, {}, {&dout});
      if (on_cpu()) {
        const float* pd = f32(dout);
        float* pt = f32(dtable);
        ctx().launch([=] { kernels::cpu::embedding_backward(pi, pd, pt, n, H); });
        return;
      }
#ifdef DFLASH_CUDA
      if (void* s = ctx().cuda_stream_for_launch())
        kernels::cuda::embedding_backward(pi, dout.raw(), bf16(dout), dtable.raw(), bf16(dtable), n, V, H, s);
#endif
    });
  }
  return out;
}

}  // namespace dflash::ops

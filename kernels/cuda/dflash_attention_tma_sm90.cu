// Host side of the producers' TMA loads: the tensor maps (CUtensorMap), encoded by the driver at
// launch where the shapes' rule (kernels/heuristics.h) and the tensors' alignment allow TMA: k and
// v for the query side's key tiles (forward, dq), q, dout, lse and delta for dk/dv's chunks
// (dflash_attention_dkdv_sm90.cu).
#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>

#include <cudaTypedefs.h>

#include "kernels/cuda/dflash_attention_sm90.cuh"

namespace dflash::kernels::cuda::sm90 {
namespace {

// cuTensorMapEncodeTiled from the driver the runtime loaded (no link against libcuda), once.
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static PFN_cuTensorMapEncodeTiled_v12000 fn = nullptr;
  static std::once_flag once;
  std::call_once(once, [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    if (cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault, &found) ==
            cudaSuccess &&
        found == cudaDriverEntryPointSuccess)
      fn = reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  });
  if (fn == nullptr)
    throw std::runtime_error(
        "dflash attention (sm90): the driver has no cuTensorMapEncodeTiled; install a driver of CUDA 12 or "
        "later");
  return fn;
}

// A tiled map over `rank` dimensions (innermost first; strides in bytes for dimensions 1..rank-1).
void encode(CUtensorMap* map, CUtensorMapDataType type, uint32_t rank, const void* base, const cuuint64_t* dims,
            const cuuint64_t* strides, const cuuint32_t* box, CUtensorMapSwizzle swizzle, const char* what) {
  const cuuint32_t ones[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(map, type, rank, const_cast<void*>(base), dims, strides, box, ones,
                                    CU_TENSOR_MAP_INTERLEAVE_NONE, swizzle, CU_TENSOR_MAP_L2_PROMOTION_L2_128B,
                                    CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw std::runtime_error(std::string("dflash attention (sm90): cuTensorMapEncodeTiled refused the ") +
                             what + " map (CUresult " + std::to_string(int(r)) + "); report the shape");
}

bool aligned16(const void* p) { return (reinterpret_cast<uintptr_t>(p) & 15u) == 0; }

}  // namespace

bool kv_tma_maps(const Params& p, int rows, KvMaps* maps) {
  const Geometry& G = p.G;
  if (!aligned16(p.k) || !aligned16(p.v)) return false;
  // k, v: [hd][B*(S+T)][nkv], a box is one 64-column slab of a key tile.
  const cuuint64_t dims[3] = {cuuint64_t(G.hd), cuuint64_t(G.B * G.keys), cuuint64_t(G.nkv)};
  const cuuint64_t strides[2] = {cuuint64_t(G.nkv * G.hd * 2), cuuint64_t(G.hd * 2)};
  const cuuint32_t box[3] = {cuuint32_t(kSlabCols), cuuint32_t(rows), 1};
  encode(&maps->k, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p.k, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, "k");
  encode(&maps->v, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p.v, dims, strides, box, CU_TENSOR_MAP_SWIZZLE_128B, "v");
  return true;
}

bool dkdv_tma_maps(const Params& p, DkdvMaps* maps) {
  const Geometry& G = p.G;
  if (!aligned16(p.q) || !aligned16(p.dout) || !aligned16(p.lse_in) || !aligned16(p.delta)) return false;
  // q, dout: [hd][B*T][nh], a box is one 64-column slab of a chunk, rows hq * bs + slot.
  const cuuint64_t qdims[3] = {cuuint64_t(G.hd), cuuint64_t(G.B * G.T), cuuint64_t(G.nh)};
  const cuuint64_t qstrides[2] = {cuuint64_t(G.nh * G.hd * 2), cuuint64_t(G.hd * 2)};
  const cuuint32_t qbox[3] = {cuuint32_t(kSlabCols), cuuint32_t(G.bs), cuuint32_t(G.group)};
  encode(&maps->q, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p.q, qdims, qstrides, qbox, CU_TENSOR_MAP_SWIZZLE_128B, "q");
  encode(&maps->dout, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 3, p.dout, qdims, qstrides, qbox,
         CU_TENSOR_MAP_SWIZZLE_128B, "dout");
  // lse, delta: [T][B*nh], a box is a chunk's 64 words in row order.
  const cuuint64_t ldims[2] = {cuuint64_t(G.T), cuuint64_t(G.B * G.nh)};
  const cuuint64_t lstrides[1] = {cuuint64_t(G.T * 4)};
  const cuuint32_t lbox[2] = {cuuint32_t(G.bs), cuuint32_t(G.group)};
  encode(&maps->lse, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, p.lse_in, ldims, lstrides, lbox, CU_TENSOR_MAP_SWIZZLE_NONE,
         "lse");
  encode(&maps->delta, CU_TENSOR_MAP_DATA_TYPE_FLOAT32, 2, p.delta, ldims, lstrides, lbox,
         CU_TENSOR_MAP_SWIZZLE_NONE, "delta");
  return true;
}

}  // namespace dflash::kernels::cuda::sm90

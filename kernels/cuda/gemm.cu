// GEMM through cuBLAS: row-major C = op(A) op(B) computed as column-major C^T = op(B)^T op(A)^T,
// bf16 or f32 inputs with fp32 accumulation; or through cuBLASLt with an algorithm chosen at startup.
#include <cublas_v2.h>
#include <nvtx3/nvToolsExtMemCudaRt.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/gemm_lt.h"

namespace dflash::kernels::cuda {

namespace {
// compute-sanitizer's initcheck does not see cuBLAS's stores on the H200: its gpu-sanitize probes
// flag reads of GEMM outputs and none of our kernels' outputs (docs/TESTING.md). The GEMM writes
// every row of C, so the tool is told so (through NVTX; a no-op without a tool attached).
void mark_initialized(void* c, size_t bytes, cudaStream_t stream) {
  static const nvtxDomainHandle_t domain = nvtxDomainCreateA("dflash");
  nvtxMemVirtualRangeDesc_t range{bytes, c};
  nvtxMemMarkInitializedBatch_t batch{NVTX_EXT_COMPATID_MEM, sizeof(batch), NVTX_MEM_TYPE_VIRTUAL_ADDRESS, 1,
                                      sizeof(range), &range};
  nvtxMemCudaMarkInitialized(domain, stream, 0, &batch);
}
void lt_check(cublasStatus_t st, const char* what, const GemmArgs& g) {
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error(std::string("gemm (cuBLASLt): ") + what + " failed with status " + std::to_string(int(st)) +
                             " for M=" + std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K));
}

template <class T>
void set_config(cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr, int32_t v, const GemmArgs& g) {
  const T t = T(v);
  lt_check(cublasLtMatmulAlgoConfigSetAttribute(&a, attr, &t, sizeof t), "cublasLtMatmulAlgoConfigSetAttribute", g);
}

template <class T>
int32_t get_config(const cublasLtMatmulAlgo_t& a, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T t{};
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&a, attr, &t, sizeof t, &written) != CUBLAS_STATUS_SUCCESS) return -1;
  return int32_t(t);
}

cudaDataType_t ab_type(const GemmArgs& g) { return g.ab_bf16 ? CUDA_R_16BF : CUDA_R_32F; }
cudaDataType_t c_type(const GemmArgs& g) { return g.c_bf16 ? CUDA_R_16BF : CUDA_R_32F; }
cublasComputeType_t compute_type(const GemmArgs& g) {
  return g.ab_bf16 ? CUBLAS_COMPUTE_32F : CUBLAS_COMPUTE_32F_PEDANTIC;
}
}  // namespace

cublasLtHandle_t lt_handle() {
  // One per thread and device: a handle belongs to the device current when it was made.
  thread_local struct Handles {
    cublasLtHandle_t h[64] = {};
    ~Handles() {
      for (cublasLtHandle_t x : h)
        if (x) cublasLtDestroy(x);
    }
  } handles;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess || device < 0 || device >= 64)
    throw std::runtime_error("gemm: no current CUDA device for the cuBLASLt handle");
  cublasLtHandle_t& h = handles.h[device];
  if (!h && cublasLtCreate(&h) != CUBLAS_STATUS_SUCCESS) throw std::runtime_error("gemm: cublasLtCreate failed");
  return h;
}

LtGemm::LtGemm(const GemmArgs& g) {
  lt_check(cublasLtMatmulDescCreate(&op, compute_type(g), CUDA_R_32F), "cublasLtMatmulDescCreate", g);
  const cublasOperation_t op_first = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N, op_second = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &op_first, sizeof op_first), "TRANSA", g);
  lt_check(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &op_second, sizeof op_second), "TRANSB", g);
  // Stored (column-major) shapes: B is N x K (K x N when transposed), A is K x M (M x K), C is N x M.
  lt_check(cublasLtMatrixLayoutCreate(&first, ab_type(g), uint64_t(g.trans_b ? g.K : g.N), uint64_t(g.trans_b ? g.N : g.K),
                                      g.ldb),
           "layout of B", g);
  lt_check(cublasLtMatrixLayoutCreate(&second, ab_type(g), uint64_t(g.trans_a ? g.M : g.K),
                                      uint64_t(g.trans_a ? g.K : g.M), g.lda),
           "layout of A", g);
  lt_check(cublasLtMatrixLayoutCreate(&c, c_type(g), uint64_t(g.N), uint64_t(g.M), g.ldc), "layout of C", g);
}

LtGemm::~LtGemm() {
  if (c) cublasLtMatrixLayoutDestroy(c);
  if (second) cublasLtMatrixLayoutDestroy(second);
  if (first) cublasLtMatrixLayoutDestroy(first);
  if (op) cublasLtMatmulDescDestroy(op);
}

void LtGemm::run(const GemmArgs& g, const cublasLtMatmulAlgo_t& algo, void* workspace, size_t workspace_bytes,
                 cudaStream_t stream) const {
  const void* addend = g.addend ? g.addend : g.C;  // Lt's C; its D is always g.C, in the same layout
  lt_check(cublasLtMatmul(lt_handle(), op, &g.alpha, g.B, first, g.A, second, &g.beta, addend, c, g.C, c, &algo,
                          workspace, workspace_bytes, stream),
           "cublasLtMatmul", g);
}

void lt_config_of(const cublasLtMatmulAlgo_t& a, int32_t out[9]) {
  out[0] = get_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_ID);
  out[1] = get_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID);
  out[2] = get_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID);
  out[3] = get_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM);
  out[4] = get_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME);
  out[5] = get_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING);
  out[6] = get_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION);
  out[7] = get_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID);
  out[8] = get_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID);
}

cublasLtMatmulAlgo_t lt_algo_from(const GemmArgs& g, const LtGemm& d, const int32_t config[9]) {
  cublasLtMatmulAlgo_t a;
  lt_check(cublasLtMatmulAlgoInit(lt_handle(), compute_type(g), CUDA_R_32F, ab_type(g), ab_type(g), c_type(g), c_type(g),
                                  config[0], &a),
           "cublasLtMatmulAlgoInit", g);
  set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_TILE_ID, config[1], g);
  set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, config[2], g);
  set_config<int32_t>(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, config[3], g);
  set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, config[4], g);
  set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING, config[5], g);
  set_config<uint32_t>(a, CUBLASLT_ALGO_CONFIG_CUSTOM_OPTION, config[6], g);
  set_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_INNER_SHAPE_ID, config[7], g);
  set_config<uint16_t>(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, config[8], g);
  cublasLtMatmulHeuristicResult_t check{};
  lt_check(cublasLtMatmulAlgoCheck(lt_handle(), d.op, d.first, d.second, d.c, d.c, &a, &check),
           "cublasLtMatmulAlgoCheck (the chosen algorithm does not run this shape here)", g);
  return a;
}

namespace {
uint32_t alignment_of(const void* p) {
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  return a == 0 ? 256u : uint32_t(std::min<uintptr_t>(256, a & (~a + 1)));
}
}  // namespace

std::vector<cublasLtMatmulHeuristicResult_t> lt_heuristics(const GemmArgs& g, const LtGemm& d, size_t workspace_bytes,
                                                           int max_results, bool pointer_alignments) {
  cublasLtMatmulPreference_t pref = nullptr;
  lt_check(cublasLtMatmulPreferenceCreate(&pref), "cublasLtMatmulPreferenceCreate", g);
  const uint64_t ws = workspace_bytes;
  const uint32_t reductions = CUBLASLT_REDUCTION_SCHEME_COMPUTE_TYPE;
  const uint32_t align[4] = {alignment_of(g.B), alignment_of(g.A), alignment_of(g.addend ? g.addend : g.C),
                             alignment_of(g.C)};  // Lt's A, B, C, D: our B, A, addend (or C), C
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  auto set = [&](cublasLtMatmulPreferenceAttributes_t attr, const void* v, size_t n) {
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, v, n);
  };
  set(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws);
  set(CUBLASLT_MATMUL_PREF_REDUCTION_SCHEME_MASK, &reductions, sizeof reductions);
  if (pointer_alignments) {
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align[0], sizeof align[0]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align[1], sizeof align[1]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align[2], sizeof align[2]);
    set(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align[3], sizeof align[3]);
  }
  std::vector<cublasLtMatmulHeuristicResult_t> found(size_t(std::max(1, max_results)));
  int returned = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt_handle(), d.op, d.first, d.second, d.c, d.c, pref, int(found.size()),
                                        found.data(), &returned);
  cublasLtMatmulPreferenceDestroy(pref);
  lt_check(st, "cublasLtMatmulAlgoGetHeuristic", g);
  found.resize(size_t(returned));
  return found;
}

// cuBLAS's split-K kernels write partial sums into the workspace and reduce them from it; initcheck
// sees the reduction's reads but not those stores (the linear_cross_entropy, swiglu and rmsnorm GPU
// cases: 8896 reads reported in cublasLt::splitKreduce_kernel). cuBLAS writes its
// workspace before it reads it, so the buffer is marked initialized once, when the handle gets it.
void mark_gemm_workspace_initialized(void* workspace, size_t bytes, void* stream) {
  if (workspace && bytes) mark_initialized(workspace, bytes, static_cast<cudaStream_t>(stream));
}

void gemm(const GemmArgs& g, void* handle, void* stream) {
  if (g.lt_config || g.addend) {  // lt_config: chosen at startup; every launch of this shape, eager or recorded, runs it
    const LtGemm d(g);
    cublasLtMatmulAlgo_t algo;
    if (g.lt_config) {
      algo = lt_algo_from(g, d, g.lt_config);
    } else {  // a GEMM with an addend, which cublasGemmEx cannot run: cuBLASLt's first pick for g's
              // workspace and pointers (the same arguments, the same pick: eager and recorded agree)
      const std::vector<cublasLtMatmulHeuristicResult_t> picks =
          lt_heuristics(g, d, g.workspace ? g.workspace_bytes : 0, 1, true);
      if (picks.empty() || picks[0].state != CUBLAS_STATUS_SUCCESS)
        lt_check(CUBLAS_STATUS_NOT_SUPPORTED, "cublasLtMatmulAlgoGetHeuristic (no algorithm for a GEMM with an addend)", g);
      algo = picks[0].algo;
    }
    d.run(g, algo, g.workspace, g.workspace ? g.workspace_bytes : 0, static_cast<cudaStream_t>(stream));
    if (g.M > 0 && g.N > 0)
      mark_initialized(g.C, size_t((g.M - 1) * g.ldc + g.N) * (g.c_bf16 ? 2 : 4), static_cast<cudaStream_t>(stream));
    return;
  }
  cublasHandle_t h = static_cast<cublasHandle_t>(handle);
  // The handle was bound to its context's stream together with the fixed workspace. It is not
  // rebound here: cublasSetStream resets the workspace to cuBLAS's default pool, which would let
  // eager and captured GEMMs pick different algorithms (and allocate inside a capture).
  cudaStream_t bound = nullptr;
  if (cublasGetStream(h, &bound) != CUBLAS_STATUS_SUCCESS || bound != static_cast<cudaStream_t>(stream))
    throw std::runtime_error("gemm: the cuBLAS handle is bound to another stream; launch on the stream of the "
                             "context that owns the handle");
  // Column-major view: C^T [N,M] = op(B)^T [N,K] * op(A)^T [K,M]. A row-major matrix with leading
  // dim ld is the column-major transpose with the same ld.
  cublasOperation_t opB = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opA = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cudaDataType_t ab = ab_type(g), c = c_type(g);
  const cublasComputeType_t compute = compute_type(g);
  cublasStatus_t st = cublasGemmEx(h, opB, opA, int(g.N), int(g.M), int(g.K), &g.alpha, g.B, ab, int(g.ldb), g.A, ab,
                                   int(g.lda), &g.beta, g.C, c, int(g.ldc), compute, CUBLAS_GEMM_DEFAULT);
  if (st != CUBLAS_STATUS_SUCCESS)
    throw std::runtime_error("gemm: cublasGemmEx failed with status " + std::to_string(int(st)) + " for M=" +
                             std::to_string(g.M) + " N=" + std::to_string(g.N) + " K=" + std::to_string(g.K));
  if (g.M > 0 && g.N > 0)
    mark_initialized(g.C, size_t((g.M - 1) * g.ldc + g.N) * (g.c_bf16 ? 2 : 4), static_cast<cudaStream_t>(stream));
}

}  // namespace dflash::kernels::cuda

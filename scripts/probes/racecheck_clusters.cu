// Probe: which cluster feature stops compute-sanitizer's racecheck (it failed on ce_rows_slice_kernel's
// first launch with "failed to handle a hardware exception"). Each variant is one small kernel; run
// `racecheck_clusters VARIANT` under `compute-sanitizer --tool racecheck` (scripts/gpu-check.sh racecheck-probe).
#include <cooperative_groups.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <cstdlib>
#include <cstring>
namespace cg = cooperative_groups;

// Every variant: each thread writes its shared word, a barrier, then reads its neighbour's (no race).
__global__ void plain(int* out) {  // __syncthreads only: the control
  __shared__ int s[128];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = s[(threadIdx.x + 1) % 128];
}
__global__ void cluster_sync(int* out) {  // barrier.cluster.arrive + wait (cg's cluster.sync)
  __shared__ int s[128];
  s[threadIdx.x] = threadIdx.x;
  cg::this_cluster().sync();
  out[blockIdx.x * 128 + threadIdx.x] = s[(threadIdx.x + 1) % 128];
}
__global__ void split_arrive_wait(int* out) {  // arrive.release, __syncthreads, wait.acquire (the slice kernel's end)
  __shared__ int s[128];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  asm volatile("barrier.cluster.arrive.release.aligned;\n" ::: "memory");
  out[blockIdx.x * 128 + threadIdx.x] = s[(threadIdx.x + 1) % 128];
  asm volatile("barrier.cluster.wait.acquire.aligned;\n" ::: "memory");
}
__global__ void map_rank0(int* out) {  // distributed shared memory: read rank 0's words (mapa + ld.shared::cluster)
  __shared__ int s[128];
  cg::cluster_group cluster = cg::this_cluster();
  s[threadIdx.x] = int(cluster.block_rank()) * 1000 + int(cluster.num_blocks()) * 100 + threadIdx.x;
  cluster.sync();
  out[blockIdx.x * 128 + threadIdx.x] = cluster.map_shared_rank(s, 0)[(threadIdx.x + 1) % 128];
  cluster.sync();  // rank 0 stays until every CTA has read it
}
__global__ void dynamic_smem(int* out) {  // 37984 bytes of dynamic shared memory (the slice kernel's at C = 8)
  extern __shared__ int d[];
  d[threadIdx.x] = threadIdx.x;
  __syncthreads();
  out[blockIdx.x * 128 + threadIdx.x] = d[(threadIdx.x + 1) % 128];
}

__global__ void mixed_sizes(int* out) {  // 16-byte shared stores read back as 2-byte halves (the slice's bf16 reads)
  __shared__ uint4 s[128];
  s[threadIdx.x] = make_uint4(threadIdx.x, 1, 2, 3);
  __syncthreads();
  const unsigned short* h = reinterpret_cast<const unsigned short*>(s);
  out[blockIdx.x * 128 + threadIdx.x] = h[(threadIdx.x * 8 + 5) % 1024];
}
__global__ void __launch_bounds__(256, 5) bounded(int* out) {  // the slice kernel's register cap (48 at 256 threads)
  __shared__ int s[256];
  s[threadIdx.x] = threadIdx.x;
  __syncthreads();
  if (threadIdx.x < 128) out[blockIdx.x * 128 + threadIdx.x] = s[(threadIdx.x + 1) % 256];
}

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: racecheck_clusters plain|cluster_sync|split|map|dynamic|mixed|bounded CLUSTER(0: no cluster attribute)\n");
    return 2;
  }
  const char* v = argv[1];
  const unsigned C = unsigned(std::atoi(argv[2]));
  int* out = nullptr;
  cudaMalloc(&out, 8 * 128 * sizeof(int));
  void (*k)(int*) = !std::strcmp(v, "plain") ? plain : !std::strcmp(v, "cluster_sync") ? cluster_sync
                    : !std::strcmp(v, "split") ? split_arrive_wait : !std::strcmp(v, "map") ? map_rank0
                    : !std::strcmp(v, "dynamic") ? dynamic_smem : !std::strcmp(v, "mixed") ? mixed_sizes
                    : !std::strcmp(v, "bounded") ? bounded : nullptr;
  if (!k) { std::fprintf(stderr, "unknown variant %s\n", v); return 2; }
  const size_t smem = k == dynamic_smem ? 37984 : 0;
  if (smem) cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(8);
  cfg.blockDim = dim3(k == bounded ? 256 : 128);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute cluster{};
  cluster.id = cudaLaunchAttributeClusterDimension;
  cluster.val.clusterDim.x = C, cluster.val.clusterDim.y = 1, cluster.val.clusterDim.z = 1;
  cfg.attrs = &cluster;
  cfg.numAttrs = C ? 1 : 0;
  cudaError_t e = cudaLaunchKernelEx(&cfg, k, out);
  if (e == cudaSuccess) e = cudaDeviceSynchronize();
  int host[128];
  if (e == cudaSuccess) e = cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost);
  std::printf("%s cluster %u: %s (out[0] = %d)\n", v, C, cudaGetErrorString(e), e == cudaSuccess ? host[0] : -1);
  return e == cudaSuccess ? 0 : 1;
}

// The small kernels of continuous batching on the GPU (kernels/cpu/generate.cpp and
// kernels/cpu/slot_attention.cpp are the reference): the scatter of new keys and values into their
// slots, the gather of chosen rows, the decode step's rows, a prefill chunk's entries and the
// commit. Indices are read on the device; padding rows (-1) are skipped.
#include "kernels/cpu/generate_kernels.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/generate_kernels.h"

namespace dflash::kernels::cuda {

namespace {
namespace f = kernels::cpu::generate_slot;
constexpr int kFields = kernels::cpu::kGenerateSlotFields;
constexpr int kThreads = 256;

// Row r of n, `units` U each: dst row target(r) = src row source(r) when both are >= 0.
template <class U, class Dst, class Src>
__device__ __forceinline__ void move_rows(U* dst, const U* src, int64_t n, int64_t units, Dst target, Src source) {
  const int64_t total = n * units, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t r = i / units, u = i - r * units, d = target(r), s = source(r);
    if (d >= 0 && s >= 0) dst[d * units + u] = src[s * units + u];
  }
}

template <class U>
__global__ void scatter_kernel(U* cache, int64_t S, int64_t C, const U* src, int64_t n, const int32_t* slot,
                               const int32_t* pos, int64_t units) {
  move_rows(
      cache, src, n, units,
      [&](int64_t r) -> int64_t {
        const int64_t s = slot[r], p = pos[r];
        return s >= 0 && s < S && p >= 0 && p < C ? s * C + p : -1;
      },
      [](int64_t r) { return r; });
}

template <class U>
__global__ void gather_kernel(const U* src, int64_t n, const int32_t* index, int64_t m, U* out, int64_t units) {
  const int64_t total = m * units, stride = int64_t(gridDim.x) * blockDim.x;
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < total; i += stride) {
    const int64_t e = i / units, u = i - e * units, r = index[e];
    out[i] = r >= 0 && r < n ? src[r * units + u] : U{};
  }
}

__global__ void step_rows_kernel(const int32_t* state, int64_t S, int32_t* ids, int32_t* pos) {
  for (int64_t b = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; b < S; b += int64_t(gridDim.x) * blockDim.x) {
    const int32_t* slot = state + b * kFields;
    const bool on = slot[f::active] != 0;
    ids[b] = on ? slot[f::token] : 0;
    pos[b] = on ? slot[f::length] : -1;
  }
}

__global__ void entries_kernel(const int32_t* rows, int64_t m, const int32_t* slot, const int32_t* pos, int64_t P,
                               int32_t* entry_slot, int32_t* entry_pos) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < m; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t r = rows[e];
    const bool on = r >= 0 && r < P && pos[r] >= 0;
    entry_slot[e] = on ? slot[r] : -1;
    entry_pos[e] = on ? pos[r] : -1;
  }
}

// One thread per entry: entries name distinct slots (one row per slot in a step, one ending prompt
// per slot in a prefill chunk), so no two threads write one slot.
__global__ void commit_kernel(int32_t* state, int64_t S, const int32_t* entry_slot, const int32_t* entry_pos,
                              const int32_t* chosen, int64_t m, int32_t* result) {
  for (int64_t e = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; e < m; e += int64_t(gridDim.x) * blockDim.x) {
    const int64_t s = entry_slot[e];
    if (s < 0 || s >= S || entry_pos[e] < 0) {
      result[e] = -1;
      continue;
    }
    int32_t* slot = state + s * kFields;
    slot[f::token] = chosen[e];
    slot[f::length] = entry_pos[e] + 1;
    slot[f::active] = 1;
    result[e] = chosen[e];
  }
}

// The widest unit (16, 4 or 1 bytes) that divides the rows and the pointers' alignment.
int unit_bytes(size_t row_bytes, const void* a, const void* b) {
  const uintptr_t both = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b);
  if (row_bytes % 16 == 0 && (both & 15u) == 0) return 16;
  if (row_bytes % 4 == 0 && (both & 3u) == 0) return 4;
  return 1;
}
}  // namespace

void scatter_slot_rows(void* cache, int64_t S, int64_t C, const void* src, int64_t n, const int32_t* slot,
                       const int32_t* pos, size_t row_bytes, void* stream) {
  if (n == 0 || row_bytes == 0) return;
  cudaStream_t s = as_stream(stream);
  const int u = unit_bytes(row_bytes, cache, src);
  const int64_t units = int64_t(row_bytes) / u;
  const unsigned blocks = blocks_for(n * units, kThreads);
  if (u == 16)
    scatter_kernel<<<blocks, kThreads, 0, s>>>(static_cast<uint4*>(cache), S, C, static_cast<const uint4*>(src), n, slot,
                                              pos, units);
  else if (u == 4)
    scatter_kernel<<<blocks, kThreads, 0, s>>>(static_cast<uint32_t*>(cache), S, C, static_cast<const uint32_t*>(src),
                                              n, slot, pos, units);
  else
    scatter_kernel<<<blocks, kThreads, 0, s>>>(static_cast<uint8_t*>(cache), S, C, static_cast<const uint8_t*>(src), n,
                                              slot, pos, units);
  check_launch("scatter_slot_rows");
}

void gather_rows(const void* src, int64_t n, const int32_t* index, int64_t m, void* out, size_t row_bytes,
                 void* stream) {
  if (m == 0 || row_bytes == 0) return;
  cudaStream_t s = as_stream(stream);
  const int u = unit_bytes(row_bytes, src, out);
  const int64_t units = int64_t(row_bytes) / u;
  const unsigned blocks = blocks_for(m * units, kThreads);
  if (u == 16)
    gather_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint4*>(src), n, index, m, static_cast<uint4*>(out),
                                             units);
  else if (u == 4)
    gather_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint32_t*>(src), n, index, m,
                                             static_cast<uint32_t*>(out), units);
  else
    gather_kernel<<<blocks, kThreads, 0, s>>>(static_cast<const uint8_t*>(src), n, index, m, static_cast<uint8_t*>(out),
                                             units);
  check_launch("gather_rows");
}

void generate_step_rows(const int32_t* state, int64_t S, int32_t* ids, int32_t* pos, void* stream) {
  if (S == 0) return;
  step_rows_kernel<<<blocks_for(S, kThreads), kThreads, 0, as_stream(stream)>>>(state, S, ids, pos);
  check_launch("generate_step_rows");
}

void generate_entries(const int32_t* rows, int64_t m, const int32_t* slot, const int32_t* pos, int64_t P,
                      int32_t* entry_slot, int32_t* entry_pos, void* stream) {
  if (m == 0) return;
  entries_kernel<<<blocks_for(m, kThreads), kThreads, 0, as_stream(stream)>>>(rows, m, slot, pos, P, entry_slot,
                                                                              entry_pos);
  check_launch("generate_entries");
}

void generate_commit(int32_t* state, int64_t S, const int32_t* entry_slot, const int32_t* entry_pos,
                     const int32_t* chosen, int64_t m, int32_t* result, void* stream) {
  if (m == 0) return;
  commit_kernel<<<blocks_for(m, kThreads), kThreads, 0, as_stream(stream)>>>(state, S, entry_slot, entry_pos, chosen,
                                                                             m, result);
  check_launch("generate_commit");
}

}  // namespace dflash::kernels::cuda

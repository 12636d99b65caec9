// CUDA runtime calls behind plain functions: every return code is checked and named.
#include "runtime/cuda/cuda_backend.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "kernels/cuda/cuda_kernels.h"
#include "kernels/cuda/device_traits.h"
#include "runtime/error.h"

namespace dflash::cuda_backend {

namespace {
void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) {
    cudaGetLastError();
    DF_FAIL(what << " failed: " << cudaGetErrorName(e) << " (" << cudaGetErrorString(e) << ")");
  }
}
}  // namespace

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

void set_device(int index) { check(cudaSetDevice(index), "cudaSetDevice"); }

size_t free_memory(int index) {
  set_device(index);
  size_t f = 0, t = 0;
  check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
  return f;
}

size_t total_memory(int index) {
  set_device(index);
  size_t f = 0, t = 0;
  check(cudaMemGetInfo(&f, &t), "cudaMemGetInfo");
  return t;
}

const char* device_name(int index) {
  static thread_local cudaDeviceProp prop;
  check(cudaGetDeviceProperties(&prop, index), "cudaGetDeviceProperties");
  return prop.name;
}

kernels::heuristics::Device device_traits(int index) {
  kernels::heuristics::Device d;
  check(cudaDeviceGetAttribute(&d.major, cudaDevAttrComputeCapabilityMajor, index), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&d.minor, cudaDevAttrComputeCapabilityMinor, index), "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&d.sms, cudaDevAttrMultiProcessorCount, index), "cudaDeviceGetAttribute");
  return d;
}

void set_portable_kernels(bool portable) { kernels::cuda::portable_kernels().store(portable); }

void* create_stream(int index, bool greatest_priority) {
  set_device(index);
  int least = 0, greatest = 0;
  check(cudaDeviceGetStreamPriorityRange(&least, &greatest), "cudaDeviceGetStreamPriorityRange");
  cudaStream_t s;
  check(cudaStreamCreateWithPriority(&s, cudaStreamNonBlocking, greatest_priority ? greatest : least),
        "cudaStreamCreateWithPriority");
  return s;
}

void destroy_stream(void* stream) { cudaStreamDestroy(static_cast<cudaStream_t>(stream)); }

void synchronize(void* stream) { check(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)), "cudaStreamSynchronize"); }

void* create_event(int index) {
  set_device(index);
  cudaEvent_t e;
  check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
  return e;
}

void* create_timing_event(int index) {
  set_device(index);
  cudaEvent_t e;
  check(cudaEventCreate(&e), "cudaEventCreate");
  return e;
}

float elapsed_ms(void* start, void* end) {
  float ms = 0;
  check(cudaEventElapsedTime(&ms, static_cast<cudaEvent_t>(start), static_cast<cudaEvent_t>(end)),
        "cudaEventElapsedTime");
  return ms;
}

void destroy_event(void* event) { cudaEventDestroy(static_cast<cudaEvent_t>(event)); }

void record_event(void* event, void* stream) {
  check(cudaEventRecord(static_cast<cudaEvent_t>(event), static_cast<cudaStream_t>(stream)), "cudaEventRecord");
}

void wait_event(void* stream, void* event) {
  check(cudaStreamWaitEvent(static_cast<cudaStream_t>(stream), static_cast<cudaEvent_t>(event), 0), "cudaStreamWaitEvent");
}

void* create_cublas(void* stream, void* workspace, size_t workspace_bytes) {
  cublasHandle_t h;
  DF_CHECK(cublasCreate(&h) == CUBLAS_STATUS_SUCCESS, "cublasCreate failed");
  cublasSetStream(h, static_cast<cudaStream_t>(stream));
  DF_CHECK(cublasSetWorkspace(h, workspace, workspace_bytes) == CUBLAS_STATUS_SUCCESS, "cublasSetWorkspace failed");
  kernels::cuda::mark_gemm_workspace_initialized(workspace, workspace_bytes, stream);
  cublasSetMathMode(h, CUBLAS_DEFAULT_MATH);
  return h;
}

void destroy_cublas(void* handle) { cublasDestroy(static_cast<cublasHandle_t>(handle)); }

void* alloc(int index, size_t bytes) {
  set_device(index);
  void* p = nullptr;
  cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
  if (e != cudaSuccess) {
    cudaGetLastError();
    DF_FAIL("cudaMalloc of " << bytes << " bytes on cuda:" << index << " failed: " << cudaGetErrorString(e)
                             << "; use smaller buckets or batch, or turn checkpointing on");
  }
  return p;
}

void free(int index, void* p) {
  if (!p) return;
  cudaSetDevice(index);
  cudaFree(p);
}

void* alloc_async(size_t bytes, void* stream) {
  void* p = nullptr;
  check(cudaMallocAsync(&p, bytes ? bytes : 1, static_cast<cudaStream_t>(stream)), "cudaMallocAsync");
  return p;
}

void free_async(void* p, void* stream) {
  if (p) cudaFreeAsync(p, static_cast<cudaStream_t>(stream));
}

void* alloc_pinned(size_t bytes) {
  void* p = nullptr;
  check(cudaMallocHost(&p, bytes ? bytes : 1), "cudaMallocHost");
  return p;
}

void free_pinned(void* p) {
  if (p) cudaFreeHost(p);
}

void memset_async(void* p, int value, size_t bytes, void* stream) {
  check(cudaMemsetAsync(p, value, bytes, static_cast<cudaStream_t>(stream)), "cudaMemsetAsync");
}

void memcpy_async(void* dst, const void* src, size_t bytes, void* stream) {
  check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, static_cast<cudaStream_t>(stream)), "cudaMemcpyAsync");
}

void memcpy_sync(void* dst, const void* src, size_t bytes) {
  check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
  // cudaMemcpy may return before a copy from pageable host memory (or between device buffers)
  // has landed, and the contexts' streams do not synchronise with the default stream: wait here,
  // so kernels launched next on a context's stream see the data.
  check(cudaStreamSynchronize(0), "cudaStreamSynchronize after cudaMemcpy");
}

void begin_capture(void* stream) {
  check(cudaStreamBeginCapture(static_cast<cudaStream_t>(stream), cudaStreamCaptureModeThreadLocal),
        "cudaStreamBeginCapture");
}

void* end_capture_and_instantiate(void* stream) {
  cudaGraph_t graph = nullptr;
  cudaError_t e = cudaStreamEndCapture(static_cast<cudaStream_t>(stream), &graph);
  if (e != cudaSuccess) {
    cudaGetLastError();
    DF_FAIL("stream capture failed: " << cudaGetErrorString(e)
                                      << ". A kernel call inside the recording allocated, synchronised or "
                                         "touched another stream; everything a program needs must exist before recording");
  }
  cudaGraphExec_t exec = nullptr;
  // Kernel nodes keep the priority of the stream that captured them (a reduction stream's NCCL
  // kernels outrank the compute stream's), whatever stream the graph is launched into.
  cudaError_t ie = cudaGraphInstantiateWithFlags(&exec, graph, cudaGraphInstantiateFlagUseNodePriority);
  cudaGraphDestroy(graph);
  check(ie, "cudaGraphInstantiate");
  return exec;
}

void graph_launch(void* exec, void* stream) {
  check(cudaGraphLaunch(static_cast<cudaGraphExec_t>(exec), static_cast<cudaStream_t>(stream)), "cudaGraphLaunch");
}

void graph_destroy(void* exec) {
  if (exec) cudaGraphExecDestroy(static_cast<cudaGraphExec_t>(exec));
}

namespace {
// Held by a host function on the stream until `released` (or 30 s, so a submission that cannot
// finish while the stream waits does not hang: it is then timed with its latency).
void CUDART_CB hold_until_released(void* released) {
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(30);
  while (!static_cast<std::atomic<bool>*>(released)->load(std::memory_order_acquire) &&
         std::chrono::steady_clock::now() < give_up)
    std::this_thread::yield();
}
}  // namespace

double time_ms_submitted_ahead(void* stream, const std::function<void()>& submit) {
  auto st = static_cast<cudaStream_t>(stream);
  std::atomic<bool> released{false};
  check(cudaLaunchHostFunc(st, hold_until_released, &released), "cudaLaunchHostFunc");
  double ms = 0;
  try {
    ms = time_ms(stream, [&] {
      submit();
      released.store(true, std::memory_order_release);
    });
  } catch (...) {
    released.store(true, std::memory_order_release);
    cudaStreamSynchronize(st);
    throw;
  }
  return ms;
}

double time_ms(void* stream, const std::function<void()>& submit) {
  auto st = static_cast<cudaStream_t>(stream);
  cudaEvent_t a, b;
  check(cudaEventCreate(&a), "cudaEventCreate");
  check(cudaEventCreate(&b), "cudaEventCreate");
  check(cudaEventRecord(a, st), "cudaEventRecord");
  submit();
  check(cudaEventRecord(b, st), "cudaEventRecord");
  check(cudaEventSynchronize(b), "cudaEventSynchronize");
  float ms = 0;
  check(cudaEventElapsedTime(&ms, a, b), "cudaEventElapsedTime");
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  return double(ms);
}

}  // namespace dflash::cuda_backend

// The CUDA side of the runtime: streams, memory, cuBLAS handles and graph capture, behind plain
// functions so that nothing above includes CUDA headers. Defined only in CUDA builds.
#pragma once
#include <cstddef>
#include <functional>

#include "kernels/heuristics.h"

namespace dflash::cuda_backend {

int device_count();
void set_device(int index);
size_t free_memory(int index);
size_t total_memory(int index);
const char* device_name(int index);
// Compute capability and SM count of device `index`, as kernels/heuristics.h takes them (the build's
// and the config's part of the rules' device: runtime/kernel_paths.h's rules_device).
kernels::heuristics::Device device_traits(int index);
// runtime.kernels = "portable" for every launch of the process (runtime/kernel_paths.h sets it).
void set_portable_kernels(bool portable);

// A non-blocking stream at the device's least priority, or its greatest (the overlapped gradient
// reduction: its NCCL kernels take SMs ahead of the backward's kernels as those retire).
void* create_stream(int index, bool greatest_priority = false);
void destroy_stream(void* stream);
void synchronize(void* stream);

// Events with timing, for benchmarks: elapsed_ms(a, b) once both have completed.
void* create_timing_event(int index);
float elapsed_ms(void* start, void* end);

// Events without timing: dependencies between streams (inside a capture they become graph edges).
void* create_event(int index);
void destroy_event(void* event);
void record_event(void* event, void* stream);
void wait_event(void* stream, void* event);  // work submitted to `stream` later waits for `event`

// cuBLAS with a fixed workspace and math mode, so eager and captured GEMMs pick the same algorithm.
void* create_cublas(void* stream, void* workspace, size_t workspace_bytes);
void destroy_cublas(void* handle);

void* alloc(int index, size_t bytes);
void free(int index, void* p);
void* alloc_async(size_t bytes, void* stream);
void free_async(void* p, void* stream);
void* alloc_pinned(size_t bytes);
void free_pinned(void* p);

void memset_async(void* p, int value, size_t bytes, void* stream);
void memcpy_async(void* dst, const void* src, size_t bytes, void* stream);  // any direction
void memcpy_sync(void* dst, const void* src, size_t bytes);

// Capture in thread-local mode: a cudaMalloc or a synchronisation inside capture is an error.
void begin_capture(void* stream);
void* end_capture_and_instantiate(void* stream);  // returns a cudaGraphExec_t
void graph_launch(void* exec, void* stream);
void graph_destroy(void* exec);

// Device time of the work `submit` enqueues on `stream` (events before and after; synchronises).
double time_ms(void* stream, const std::function<void()>& submit);
// The same, with the stream held (a host function that waits) until `submit` has returned, so
// the work runs back to back and the time excludes the host's launch latency (which CUPTI's
// tracing lengthens: a decode step's graph of ~700 kernels launched 1.5 ms later than untraced).
double time_ms_submitted_ahead(void* stream, const std::function<void()>& submit);

}  // namespace dflash::cuda_backend

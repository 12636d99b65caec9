// cudnn_sdpa.cpp: the frozen target's causal attention through cuDNN's fused flash attention (the
// SDPA forward of NVIDIA's cudnn-frontend graph API), an alternative to causal_attention.cu for bf16.
// Compiled only where CMake found cuDNN and the pinned cudnn-frontend headers (DFLASH_CUDNN).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace dflash::kernels::cuda {

// q, out [B, S, nh, hd] and k, v [B, S, nkv, hd], bf16, contiguous, 16-byte aligned; query head h
// uses kv head h / (nh / nkv); key j is seen by query i when j <= i; scores scaled by `scale`.
struct CudnnSdpaDims {
  int64_t B, S, nh, nkv, hd;
  float scale;
};

// Which of cuDNN's plans runs: the SDPA implementation ("unified" or "composite"; empty: the
// frontend's choice, unified where it supports the graph) and the engine's tag within it (empty:
// the first plan cuDNN's heuristics (mode A) list that builds). The empty choice is the default.
struct CudnnSdpaPlanChoice {
  std::string implementation, engine;
};

// One shape's cuDNN operation graph and execution plan. Built outside stream capture (the build
// queries the device and may compile kernels); forward may then run eagerly or inside a capture.
// It enqueues work only on the stream it is given, reads q, k, v and the workspace and writes out
// only, with a fixed plan: the same inputs give the same bits.
class CudnnSdpa {
 public:
  // nullptr, with cuDNN's reason in *why_not, when cuDNN cannot run this shape on this device, or
  // when the chosen implementation or engine is not among the plans it lists for the shape.
  static std::unique_ptr<CudnnSdpa> build(void* cudnn_handle, const CudnnSdpaDims& d, std::string* why_not,
                                          const CudnnSdpaPlanChoice& choice = {});
  // Every (implementation, engine) cuDNN's heuristics (modes A and B) list for the shape, each once,
  // in their order (whether each builds is known only by building it); "why" holds what failed.
  static std::vector<CudnnSdpaPlanChoice> list_plans(void* cudnn_handle, const CudnnSdpaDims& d, std::string* why);
  ~CudnnSdpa();
  CudnnSdpa(const CudnnSdpa&) = delete;
  CudnnSdpa& operator=(const CudnnSdpa&) = delete;

  const CudnnSdpaDims& dims() const;
  size_t workspace_bytes() const;  // the device scratch forward needs (may be 0)
  // The implementation ("auto" when the frontend chose it) and the engine tag that were built.
  const CudnnSdpaPlanChoice& plan() const;
  // Throws std::runtime_error naming cuDNN's error when the launch is refused.
  void forward(void* cudnn_handle, const void* q, const void* k, const void* v, void* out, void* workspace,
               void* stream) const;

 private:
  struct Impl;
  explicit CudnnSdpa(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// A cuDNN handle for the current device, or nullptr with the reason in *why_not.
void* cudnn_create(std::string* why_not);
void cudnn_destroy(void* handle);
// "cuDNN 9.14.0 (headers 9.14.0), cudnn-frontend 1.32.0"
std::string cudnn_versions();

}  // namespace dflash::kernels::cuda

// Safetensors checkpoints: a reader that validates the whole header when the file is opened, converts
// tensors to host vectors or runtime tensors, and an atomic writer. Layout: docs/MODEL.md, "Files".
#pragma once
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "runtime/dtype.h"
#include "runtime/fileio.h"
#include "runtime/shape.h"
#include "runtime/tensor.h"

namespace dflash {

// File dtypes the reader accepts, as spelled in a header.
inline constexpr const char* kSafeTensorsDTypes = "F32, F16, BF16, F64, I32, I64, U8, BOOL";

// One tensor of a file, as its header describes it (already validated).
struct SafeTensorInfo {
  std::string dtype;           // "F32", "BF16", ...
  std::vector<int64_t> shape;  // any rank; [] is a scalar of one element
  size_t offset = 0;           // bytes from the start of the data section
  size_t nbytes = 0;           // numel * dtype size
  int64_t numel() const;
};

// A safetensors file, memory-mapped read-only for the object's lifetime (tensor bytes are read
// from the mapping, never copied whole). The constructor validates the header and the data layout
// and throws Error naming the file, the tensor, what is wrong and how to fix it.
class SafeTensors {
 public:
  explicit SafeTensors(const std::filesystem::path& path);

  const std::filesystem::path& path() const { return file_.path(); }
  // Tensor names in sorted (byte-wise) order, whatever their order in the file.
  const std::vector<std::string>& names() const { return names_; }
  bool has(const std::string& name) const { return tensors_.count(name) != 0; }
  const SafeTensorInfo& info(const std::string& name) const;  // throws naming the file when absent
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // The tensor's little-endian bytes inside the mapping: info(name).nbytes of them, valid while this
  // object lives, and NOT necessarily aligned to the element size (read with memcpy).
  const uint8_t* bytes(const std::string& name) const;

  // F32, BF16, F16 or F64 -> f32 (an F64 value beyond the f32 range is an error).
  std::vector<float> read_floats(const std::string& name) const;
  // I32, I64 (an error outside the int32 range), U8 or BOOL (0/1) -> i32.
  std::vector<int32_t> read_ints(const std::string& name) const;

  // A persistent tensor in the current context holding the converted tensor:
  //   f32  <- F32, BF16, F16, F64      bf16 <- BF16 (as is), F32 or F16 (rounded to nearest even)
  //   i32  <- I32, I64, U8, BOOL       u8   <- U8, BOOL
  // When `expect` is given, the file's shape must equal it. The tensor is named after the key.
  Tensor load(const std::string& name, DType target, const std::optional<Shape>& expect = std::nullopt) const;
  // The same conversion into an existing tensor (dst's dtype; its shape must equal the file's),
  // for weights packed into one buffer: dst may be a rows() view of it.
  void load_into(const std::string& name, const Tensor& dst) const;

  // Throws naming the file, the tensor and the first NaN or Inf (flat and multi-dim index).
  // Integer tensors always pass.
  void check_finite(const std::string& name) const;
  void check_all_finite() const;

 private:
  std::string where(const std::string& name) const;  // "safetensors 'file': tensor 'name'"
  Shape file_shape(const std::string& name) const;   // at most kMaxDims dims, else an error
  void convertible(const std::string& name, DType target) const;  // an error naming the dtypes it takes
  MappedFile file_;
  const uint8_t* data_ = nullptr;  // start of the data section
  size_t data_size_ = 0;
  std::map<std::string, SafeTensorInfo> tensors_;
  std::vector<std::string> names_;
  std::map<std::string, std::string> metadata_;
};

// One tensor to write: `data` holds numel * dtype size little-endian row-major bytes.
struct SafeTensorsEntry {
  std::string name;
  std::string dtype;  // a file dtype: "F32", "BF16", "I32", "U8", ...
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes a safetensors file atomically (write_file_atomic). The header lists the tensors in the
// order given (then `__metadata__` when non-empty), is padded with spaces to a multiple of 8 bytes
// so the data section starts 8-byte aligned, and the data follow in the same order with no gaps.
void write_safetensors(const std::filesystem::path& path, const std::vector<SafeTensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata = {});
// The same for runtime tensors (any device; copied to the host one at a time while writing).
void write_safetensors(const std::filesystem::path& path,
                       const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata = {});

// The file dtype of a runtime dtype: f32 -> "F32", bf16 -> "BF16", i32 -> "I32", u8 -> "U8".
const char* safetensors_dtype(DType dtype);

}  // namespace dflash

// Tensor: a handle with shared ownership of storage on one device; dtype, up to 4-D shape,
// row-major and contiguous, plus cheap views (reshape, row ranges). A mismatch throws with the
// op, the shapes and the fix.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/allocator.h"
#include "runtime/device.h"
#include "runtime/dtype.h"
#include "runtime/error.h"
#include "runtime/shape.h"

namespace dflash {

struct TensorImpl {
  std::shared_ptr<Storage> storage;
  size_t offset = 0;  // bytes from the start of storage
  Shape shape;
  DType dtype = DType::f32;
  uint64_t id = 0;          // unique per handle-creating call; autograd keys gradients by it
  bool requires_grad = false;
  bool is_leaf = true;      // made by the user (parameter, input), not by an op
  uint64_t generation = 0;  // non-leaf: the tape generation whose forward made it
  std::shared_ptr<TensorImpl> grad;  // leaf: its gradient buffer, accumulated with +=
  std::string name;
};

class Tensor {
 public:
  Tensor() = default;
  explicit Tensor(std::shared_ptr<TensorImpl> impl) : impl_(std::move(impl)) {}

  // A temporary: heap memory in eager mode, the arena while recording. Contents undefined.
  static Tensor empty(const Shape& shape, DType dtype);
  // A temporary filled with zeros by a kernel call (so it is recorded too).
  static Tensor zeros(const Shape& shape, DType dtype);
  // A persistent tensor (never in an arena), zero-filled now. Not allowed while recording.
  // host = true: in host memory (pinned when the context is on a GPU), e.g. a staging buffer.
  static Tensor persistent(const Shape& shape, DType dtype, const std::string& name = "", bool host = false);
  // A persistent tensor holding a copy of host data of the given dtype.
  static Tensor from_host(const Shape& shape, DType dtype, const void* data, const std::string& name = "");
  static Tensor from_floats(const Shape& shape, const std::vector<float>& values, const std::string& name = "");
  static Tensor from_ints(const Shape& shape, const std::vector<int32_t>& values, const std::string& name = "");

  bool defined() const { return impl_ != nullptr; }
  const Shape& shape() const { return impl().shape; }
  int64_t dim(int i) const { return impl().shape[i]; }
  int ndim() const { return impl().shape.ndim; }
  DType dtype() const { return impl().dtype; }
  Device device() const { return impl().storage->device; }
  int64_t numel() const { return impl().shape.numel(); }
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype()); }
  uint64_t id() const { return impl().id; }
  const std::string& name() const { return impl().name; }
  Tensor& set_name(const std::string& n) {
    impl().name = n;
    return *this;
  }
  bool in_arena() const { return impl().storage->in_arena; }

  void* raw() const { return static_cast<char*>(impl().storage->data) + impl().offset; }
  template <class T>
  T* data() const;

  // Views sharing storage; recorded by autograd when the tensor requires grad.
  Tensor reshape(const Shape& shape) const;
  Tensor rows(int64_t begin, int64_t end) const;  // a range along dimension 0

  // Autograd.
  bool requires_grad() const { return impl().requires_grad; }
  bool is_leaf() const { return impl().is_leaf; }
  // Marks a leaf as trainable. Its gradient goes to `grad` (a persistent f32 tensor of the same
  // shape), or to a new zero-filled persistent buffer when none is given.
  Tensor& set_requires_grad(bool on, Tensor grad = {});
  Tensor grad() const { return impl().grad ? Tensor(impl().grad) : Tensor(); }

  // Synchronous host copies; refused while recording (a program only reads static buffers).
  void copy_from_host(const void* src, size_t bytes) const;
  void copy_to_host(void* dst, size_t bytes) const;
  std::vector<float> to_floats() const;  // f32 or bf16, converted
  std::vector<int32_t> to_ints() const;  // i32 or u8, converted
  float item() const;                    // a one-element tensor

  // "f32[2,3] 'name'" for messages.
  std::string describe() const;

  TensorImpl& impl() const {
    DF_CHECK(impl_, "use of an undefined tensor (a default-constructed Tensor)");
    return *impl_;
  }
  const std::shared_ptr<TensorImpl>& impl_ptr() const { return impl_; }

 private:
  std::shared_ptr<TensorImpl> impl_;
};

uint64_t next_tensor_id();

template <class T>
struct dtype_of;
template <>
struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <>
struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };
template <>
struct dtype_of<uint8_t> { static constexpr DType value = DType::u8; };
template <>
struct dtype_of<uint16_t> { static constexpr DType value = DType::bf16; };

template <class T>
T* Tensor::data() const {
  DF_CHECK(dtype() == dtype_of<T>::value, "data<" << dtype_name(dtype_of<T>::value) << ">() on "
                                                   << describe() << ": read it with its own dtype");
  return static_cast<T*>(raw());
}

// Checks shared by ops: each names the op, the tensors and the fix.
void check_dtype(const char* op, const Tensor& t, DType want, const char* role);
void check_same_device(const char* op, const std::vector<const Tensor*>& ts);
void check_shape(const char* op, const Tensor& t, const Shape& want, const char* role);
void check_ndim(const char* op, const Tensor& t, int ndim, const char* role);

}  // namespace dflash

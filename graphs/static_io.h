// A program's static inputs and outputs. The host writes a staging buffer before replay; the
// program's first kernel calls copy staging into the device tensors it reads, and its last ones
// copy its results into host-readable buffers. Addresses never change after startup.
#pragma once
#include <string>
#include <vector>

#include "runtime/tensor.h"

namespace dflash {

class StaticIO {
 public:
  // Declares an input (before recording): returns the device tensor the program reads.
  Tensor input(const std::string& name, const Shape& shape, DType dtype);
  // Declares an output (before recording): returns the device tensor the program writes.
  Tensor output(const std::string& name, const Shape& shape, DType dtype);

  const Tensor& staging(const std::string& name) const;  // host buffer to fill before replay
  const Tensor& result(const std::string& name) const;   // host buffer to read after replay
  const Tensor& device(const std::string& name) const;

  void stage_in() const;   // kernel calls: staging -> device inputs (a program's first step)
  void stage_out() const;  // kernel calls: device outputs -> results (a program's last step)

 private:
  struct Slot {
    std::string name;
    Tensor device, host;
  };
  const Slot& find(const std::string& name) const;
  std::vector<Slot> inputs_, outputs_;
};

}  // namespace dflash

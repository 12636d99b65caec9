// StaticIO: persistent staging/result buffers and the copies at a program's edges.
#include "graphs/static_io.h"

#include "runtime/context.h"
#include "runtime/ops.h"

namespace dflash {

Tensor StaticIO::input(const std::string& name, const Shape& shape, DType dtype) {
  Tensor dev = Tensor::persistent(shape, dtype, name);
  Tensor host = Tensor::persistent(shape, dtype, name + ".staging", /*host=*/true);
  inputs_.push_back({name, dev, host});
  return dev;
}

Tensor StaticIO::output(const std::string& name, const Shape& shape, DType dtype) {
  Tensor dev = Tensor::persistent(shape, dtype, name);
  Tensor host = Tensor::persistent(shape, dtype, name + ".result", /*host=*/true);
  outputs_.push_back({name, dev, host});
  return dev;
}

const StaticIO::Slot& StaticIO::find(const std::string& name) const {
  for (const auto* list : {&inputs_, &outputs_})
    for (const Slot& s : *list)
      if (s.name == name) return s;
  DF_FAIL("no static buffer named '" << name << "'");
}

const Tensor& StaticIO::staging(const std::string& name) const { return find(name).host; }
const Tensor& StaticIO::result(const std::string& name) const { return find(name).host; }
const Tensor& StaticIO::device(const std::string& name) const { return find(name).device; }

void StaticIO::stage_in() const {
  for (const Slot& s : inputs_) ops::copy_(s.device, s.host);
}

void StaticIO::stage_out() const {
  for (const Slot& s : outputs_) ops::copy_(s.host, s.device);
}

}  // namespace dflash

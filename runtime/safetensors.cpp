// Safetensors reader (validated up front, over a read-only memory map), conversions and atomic writer.
#include "runtime/safetensors.h"

#include <algorithm>
#include <bit>
#include <cctype>
#include <cmath>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/error.h"

namespace dflash {

static_assert(std::endian::native == std::endian::little, "safetensors data are little-endian; so is the host");

namespace {

using json = nlohmann::json;
constexpr uint64_t kMaxHeaderBytes = 100ull << 20;

enum class Kind { F32, F16, BF16, F64, I32, I64, U8, BOOL, unknown };

struct KindInfo {
  const char* name;
  Kind kind;
  size_t size;
};
constexpr KindInfo kKinds[] = {{"F32", Kind::F32, 4}, {"F16", Kind::F16, 2}, {"BF16", Kind::BF16, 2},
                               {"F64", Kind::F64, 8}, {"I32", Kind::I32, 4}, {"I64", Kind::I64, 8},
                               {"U8", Kind::U8, 1},   {"BOOL", Kind::BOOL, 1}};

const KindInfo* find_kind(const std::string& name) {
  for (const KindInfo& k : kKinds)
    if (name == k.name) return &k;
  return nullptr;
}
Kind kind_of(const SafeTensorInfo& t) { return find_kind(t.dtype)->kind; }

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? "," : "") + std::to_string(shape[i]);
  return s + "]";
}

// numel * elem_size, or nullopt when it does not fit in 64 bits.
std::optional<uint64_t> byte_size(const std::vector<int64_t>& shape, size_t elem_size) {
  uint64_t n = elem_size;
  for (int64_t d : shape)
    if (__builtin_mul_overflow(n, uint64_t(d), &n)) return std::nullopt;
  return n;
}

// "17 ([0,17])": a flat index and the same position per dimension.
std::string index_str(size_t flat, const std::vector<int64_t>& shape) {
  std::vector<int64_t> idx(shape.size());
  size_t rest = flat;
  for (size_t k = shape.size(); k-- > 0;) {
    idx[k] = int64_t(rest % uint64_t(shape[k]));
    rest /= uint64_t(shape[k]);
  }
  return std::to_string(flat) + " (" + shape_str(idx) + ")";
}

template <class T>
T load_at(const uint8_t* p, size_t i) {
  T v;
  std::memcpy(&v, p + i * sizeof(T), sizeof(T));
  return v;
}

const char* kCorruptFix = "fix: the file is corrupt or was written by a broken writer; export it again";

}  // namespace

int64_t SafeTensorInfo::numel() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string SafeTensors::where(const std::string& name) const {
  return "safetensors '" + path().string() + "': tensor '" + name + "'";
}

SafeTensors::SafeTensors(const std::filesystem::path& path) : file_(path) {
  const std::string f = "safetensors '" + path.string() + "'";
  const size_t size = file_.size();
  DF_CHECK(size >= 8, f << ": the file is " << size << " bytes, shorter than the 8-byte header length; "
                        << "fix: it is truncated or not a safetensors file; write it again");
  const uint64_t n = load_at<uint64_t>(file_.data(), 0);
  DF_CHECK(n <= kMaxHeaderBytes, f << ": header length " << n << " bytes is absurdly large (over 100 MiB); "
                                   << "fix: this is not a safetensors file, or its first 8 bytes are corrupt");
  DF_CHECK(n <= size - 8, f << ": header length " << n << " bytes runs past the end of the file (" << size
                            << " bytes); fix: the file is truncated; write or download it again");
  data_ = file_.data() + 8 + n;
  data_size_ = size - 8 - size_t(n);

  // Duplicate top-level keys would silently replace each other in the parsed object.
  std::string duplicate;
  std::set<std::string> seen;
  json::parser_callback_t on_event = [&](int depth, json::parse_event_t ev, json& parsed) {
    if (ev == json::parse_event_t::key && depth == 1 && !seen.insert(parsed.get<std::string>()).second)
      duplicate = parsed.get<std::string>();
    return true;
  };
  json header;
  const char* text = reinterpret_cast<const char*>(file_.data() + 8);
  try {
    header = json::parse(text, text + n, on_event);
  } catch (const json::exception& e) {
    DF_FAIL(f << ": the " << n << "-byte header is not valid JSON (" << e.what() << "); " << kCorruptFix);
  }
  DF_CHECK(header.is_object(), f << ": the header is a JSON " << header.type_name()
                                 << ", not an object {name: {dtype, shape, data_offsets}}; " << kCorruptFix);
  DF_CHECK(duplicate.empty(), f << ": the header lists '" << duplicate << "' twice; " << kCorruptFix);
  // The format: the header is a JSON object starting at its first byte (padding may only follow it).
  DF_CHECK(text[0] == '{', f << ": the header begins with byte " << int(uint8_t(text[0])) << " ('"
                             << (std::isprint(uint8_t(text[0])) ? std::string(1, text[0]) : std::string("?"))
                             << "'), not '{': the format puts the JSON object at the first byte of the header; "
                             << kCorruptFix);
  // The format: only spaces (0x20) may follow the JSON object. The parser stops at a NUL byte, so
  // NUL padding (or any NUL) must be refused here; so is trailing whitespace other than spaces.
  const void* nul = std::memchr(text, 0, size_t(n));
  DF_CHECK(!nul, f << ": the header holds a NUL byte at offset " << (static_cast<const char*>(nul) - text)
                   << ": the format pads the header with spaces (0x20) only; " << kCorruptFix);
  size_t end = size_t(n);
  while (end > 0 && text[end - 1] == ' ') --end;
  DF_CHECK(text[end - 1] == '}', f << ": the header's JSON object is followed by byte " << int(uint8_t(text[end - 1]))
                                   << " before the data: the format pads the header with spaces (0x20) only; "
                                   << kCorruptFix);

  for (const auto& [name, entry] : header.items()) {
    if (name == "__metadata__") {
      DF_CHECK(entry.is_object(), f << ": __metadata__ is a JSON " << entry.type_name()
                                    << ", not an object of strings; " << kCorruptFix);
      for (const auto& [key, value] : entry.items()) {
        DF_CHECK(value.is_string(), f << ": __metadata__ value of '" << key << "' is a JSON " << value.type_name()
                                      << " (" << value.dump() << "), not a string; fix: metadata values must "
                                      << "be strings; write str(value)");
        metadata_[key] = value.get<std::string>();
      }
      continue;
    }
    const std::string w = where(name);
    DF_CHECK(entry.is_object(), w << ": the entry is a JSON " << entry.type_name()
                                  << ", not an object {dtype, shape, data_offsets}; " << kCorruptFix);
    for (const char* field : {"dtype", "shape", "data_offsets"})
      DF_CHECK(entry.contains(field), w << ": the entry has no \"" << field << "\" (it has " << entry.dump()
                                        << "); " << kCorruptFix);
    const json& dtype = entry["dtype"];
    const json& shape = entry["shape"];
    const json& offsets = entry["data_offsets"];
    DF_CHECK(dtype.is_string(), w << ": dtype is a JSON " << dtype.type_name() << " (" << dtype.dump()
                                  << "), not a string such as \"F32\"; " << kCorruptFix);
    const KindInfo* kind = find_kind(dtype.get<std::string>());
    DF_CHECK(kind, w << ": unknown dtype \"" << dtype.get<std::string>() << "\"; supported: " << kSafeTensorsDTypes
                     << "; fix: convert the checkpoint to one of these (e.g. F32 or BF16)");
    DF_CHECK(shape.is_array(), w << ": shape is a JSON " << shape.type_name() << " (" << shape.dump()
                                 << "), not an array of integers; " << kCorruptFix);
    SafeTensorInfo info;
    info.dtype = kind->name;
    for (const json& d : shape) {
      DF_CHECK(d.is_number_integer(), w << ": shape " << shape.dump() << " holds a JSON " << d.type_name()
                                        << " (" << d.dump() << "), not an integer; " << kCorruptFix);
      DF_CHECK(d.is_number_unsigned(), w << ": shape " << shape.dump() << " has a negative dimension "
                                         << d.dump() << "; " << kCorruptFix);
      DF_CHECK(d.get<uint64_t>() <= uint64_t(INT64_MAX), w << ": dimension " << d.dump() << " is too large");
      info.shape.push_back(d.get<int64_t>());
    }
    DF_CHECK(offsets.is_array() && offsets.size() == 2 && offsets[0].is_number_integer() &&
                 offsets[1].is_number_integer(),
             w << ": data_offsets is " << offsets.dump() << ", not [begin, end] (two integers); " << kCorruptFix);
    DF_CHECK(offsets[0].is_number_unsigned() && offsets[1].is_number_unsigned(),
             w << ": data_offsets " << offsets.dump() << " has a negative offset; " << kCorruptFix);
    const uint64_t begin = offsets[0].get<uint64_t>(), end = offsets[1].get<uint64_t>();
    DF_CHECK(begin <= end, w << ": data_offsets " << offsets.dump() << " has begin > end; " << kCorruptFix);
    DF_CHECK(end <= data_size_, w << ": data_offsets " << offsets.dump() << " lie outside the data section ("
                                  << data_size_ << " bytes after the " << n << "-byte header); fix: the file is "
                                  << "truncated or corrupt; write or download it again");
    const std::optional<uint64_t> need = byte_size(info.shape, kind->size);
    DF_CHECK(need && *need == end - begin,
             w << ": data_offsets " << offsets.dump() << " cover " << (end - begin) << " bytes but " << info.dtype
               << shape_str(info.shape) << " needs "
               << (need ? std::to_string(*need) + " (numel * " + std::to_string(kind->size) + ")" : "more than 2^64")
               << "; " << kCorruptFix);
    info.offset = size_t(begin);
    info.nbytes = size_t(end - begin);
    tensors_.emplace(name, std::move(info));
    names_.push_back(name);
  }
  std::sort(names_.begin(), names_.end());

  // The tensors must tile [0, data_size_) exactly: no overlaps, no holes.
  std::vector<std::pair<const std::string*, const SafeTensorInfo*>> by_offset;
  for (const auto& [name, info] : tensors_) by_offset.push_back({&name, &info});
  std::sort(by_offset.begin(), by_offset.end(), [](const auto& a, const auto& b) {
    return std::pair(a.second->offset, a.second->nbytes) < std::pair(b.second->offset, b.second->nbytes);
  });
  size_t cursor = 0;
  const std::string* prev = nullptr;
  auto span = [](const SafeTensorInfo* t) {
    return "[" + std::to_string(t->offset) + ", " + std::to_string(t->offset + t->nbytes) + ")";
  };
  const SafeTensorInfo* prev_info = nullptr;
  for (const auto& [name, info] : by_offset) {
    DF_CHECK(info->offset >= cursor, "safetensors '" << path.string() << "': tensors '" << *prev << "' "
                                                     << span(prev_info) << " and '" << *name << "' "
                                                     << span(info) << " overlap; " << kCorruptFix);
    DF_CHECK(info->offset == cursor, "safetensors '" << path.string() << "': bytes [" << cursor << ", "
                                                     << info->offset << ") of the data section belong to no "
                                                     << "tensor (a hole before '" << *name << "'); " << kCorruptFix);
    cursor = info->offset + info->nbytes;
    prev = name;
    prev_info = info;
  }
  DF_CHECK(cursor == data_size_, "safetensors '" << path.string() << "': bytes [" << cursor << ", " << data_size_
                                                 << ") at the end of the data section belong to no tensor (a hole"
                                                 << (prev ? " after '" + *prev + "'" : std::string()) << "); "
                                                 << kCorruptFix);
}

const SafeTensorInfo& SafeTensors::info(const std::string& name) const {
  auto it = tensors_.find(name);
  if (it != tensors_.end()) return it->second;
  std::string some;
  for (size_t i = 0; i < names_.size() && i < 6; ++i) some += (i ? ", '" : "'") + names_[i] + "'";
  DF_FAIL(where(name) << ": no such tensor; the file has " << names_.size() << " tensors"
                      << (names_.empty() ? "" : " (" + some + (names_.size() > 6 ? ", ...)" : ")"))
                      << "; fix: check the key name and prefix (e.g. 'model.') against the checkpoint");
}

const uint8_t* SafeTensors::bytes(const std::string& name) const { return data_ + info(name).offset; }

std::vector<float> SafeTensors::read_floats(const std::string& name) const {
  const SafeTensorInfo& t = info(name);
  const uint8_t* p = data_ + t.offset;
  std::vector<float> out(size_t(t.numel()));
  switch (kind_of(t)) {
    case Kind::F32:
      if (!out.empty()) std::memcpy(out.data(), p, t.nbytes);
      break;
    case Kind::BF16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = bf16_to_f32(load_at<uint16_t>(p, i));
      break;
    case Kind::F16:
      for (size_t i = 0; i < out.size(); ++i) out[i] = f16_to_f32(load_at<uint16_t>(p, i));
      break;
    case Kind::F64:
      for (size_t i = 0; i < out.size(); ++i) {
        double d = load_at<double>(p, i);
        out[i] = float(d);
        DF_CHECK(!std::isinf(out[i]) || std::isinf(d),
                 where(name) << ": F64 value " << d << " at index " << index_str(i, t.shape)
                             << " is beyond the f32 range; fix: rescale it or read it as F64 yourself");
      }
      break;
    default:
      DF_FAIL(where(name) << " is " << t.dtype << "; read_floats reads F32, BF16, F16 and F64; "
                          << "fix: read integer tensors with read_ints");
  }
  return out;
}

std::vector<int32_t> SafeTensors::read_ints(const std::string& name) const {
  const SafeTensorInfo& t = info(name);
  const uint8_t* p = data_ + t.offset;
  std::vector<int32_t> out(size_t(t.numel()));
  switch (kind_of(t)) {
    case Kind::I32:
      if (!out.empty()) std::memcpy(out.data(), p, t.nbytes);
      break;
    case Kind::I64:
      for (size_t i = 0; i < out.size(); ++i) {
        int64_t v = load_at<int64_t>(p, i);
        DF_CHECK(v >= INT32_MIN && v <= INT32_MAX, where(name) << ": I64 value " << v << " at index "
                                                               << index_str(i, t.shape)
                                                               << " does not fit in int32; fix: store it as I32-sized values");
        out[i] = int32_t(v);
      }
      break;
    case Kind::U8:
      for (size_t i = 0; i < out.size(); ++i) out[i] = p[i];
      break;
    case Kind::BOOL:
      for (size_t i = 0; i < out.size(); ++i) out[i] = p[i] != 0;
      break;
    default:
      DF_FAIL(where(name) << " is " << t.dtype << "; read_ints reads I32, I64, U8 and BOOL; "
                          << "fix: read floating-point tensors with read_floats");
  }
  return out;
}

Tensor SafeTensors::load(const std::string& name, DType target, const std::optional<Shape>& expect) const {
  const Shape shape = file_shape(name);
  DF_CHECK(!expect || *expect == shape, where(name) << " has shape " << shape.str() << " but " << expect->str()
                                                    << " was expected; fix: the checkpoint does not match the "
                                                    << "model config (check sizes, layer count and vocab)");
  convertible(name, target);  // refused before anything is allocated
  Tensor t = Tensor::persistent(shape, target, name);
  load_into(name, t);
  return t;
}

Shape SafeTensors::file_shape(const std::string& name) const {
  const SafeTensorInfo& t = info(name);
  DF_CHECK(t.shape.size() <= size_t(Shape::kMaxDims),
           where(name) << " has shape " << shape_str(t.shape) << "; runtime tensors have at most 4 dimensions; "
                       << "fix: reshape it when exporting, or read it with read_floats/read_ints");
  return Shape::of(t.shape);
}

void SafeTensors::convertible(const std::string& name, DType target) const {
  const SafeTensorInfo& t = info(name);
  const Kind k = kind_of(t);
  auto refuse = [&](const char* accepted) {
    DF_FAIL(where(name) << " is " << t.dtype << " and cannot be loaded as " << dtype_name(target) << " (which takes "
                        << accepted << "); fix: load it as a matching dtype or convert the checkpoint");
  };
  switch (target) {
    case DType::f32:
      if (k != Kind::F32 && k != Kind::BF16 && k != Kind::F16 && k != Kind::F64) refuse("F32, BF16, F16, F64");
      return;
    case DType::bf16:
      if (k != Kind::BF16 && k != Kind::F32 && k != Kind::F16) refuse("BF16, F32, F16");
      return;
    case DType::i32:
      if (k != Kind::I32 && k != Kind::I64 && k != Kind::U8 && k != Kind::BOOL) refuse("I32, I64, U8, BOOL");
      return;
    case DType::u8:
      if (k != Kind::U8 && k != Kind::BOOL) refuse("U8, BOOL");
      return;
  }
  DF_FAIL(where(name) << ": unknown target dtype");
}

void SafeTensors::load_into(const std::string& name, const Tensor& dst) const {
  const Shape shape = file_shape(name);
  DF_CHECK(dst.shape() == shape, where(name) << " has shape " << shape.str() << " but " << dst.shape().str()
                                             << " was expected; fix: the checkpoint does not match the "
                                             << "model config (check sizes, layer count and vocab)");
  const DType target = dst.dtype();
  convertible(name, target);
  const SafeTensorInfo& t = info(name);
  const Kind k = kind_of(t);
  switch (target) {
    case DType::f32:
      dst.copy_from_host(read_floats(name).data(), dst.nbytes());
      return;
    case DType::bf16: {
      if (k == Kind::BF16) {
        dst.copy_from_host(data_ + t.offset, dst.nbytes());
        return;
      }
      std::vector<float> f = read_floats(name);
      std::vector<uint16_t> h(f.size());
      for (size_t i = 0; i < f.size(); ++i) h[i] = f32_to_bf16(f[i]);
      dst.copy_from_host(h.data(), dst.nbytes());
      return;
    }
    case DType::i32:
      dst.copy_from_host(read_ints(name).data(), dst.nbytes());
      return;
    case DType::u8: {
      std::vector<uint8_t> b(data_ + t.offset, data_ + t.offset + t.nbytes);
      if (k == Kind::BOOL)
        for (uint8_t& x : b) x = x != 0;
      dst.copy_from_host(b.data(), dst.nbytes());
      return;
    }
  }
}

void SafeTensors::check_finite(const std::string& name) const {
  const SafeTensorInfo& t = info(name);
  const Kind k = kind_of(t);
  if (k != Kind::F32 && k != Kind::BF16 && k != Kind::F16 && k != Kind::F64) return;
  const uint8_t* p = data_ + t.offset;
  const size_t n = size_t(t.numel());
  for (size_t i = 0; i < n; ++i) {
    double v = k == Kind::F64 ? load_at<double>(p, i) : k == Kind::F32 ? double(load_at<float>(p, i))
               : k == Kind::BF16                       ? double(bf16_to_f32(load_at<uint16_t>(p, i)))
                                                       : double(f16_to_f32(load_at<uint16_t>(p, i)));
    DF_CHECK(std::isfinite(v), where(name) << " (" << t.dtype << shape_str(t.shape) << ") holds "
                                           << (std::isnan(v) ? "NaN" : v > 0 ? "+Inf" : "-Inf")
                                           << " at index " << index_str(i, t.shape)
                                           << " (the first non-finite value); fix: the checkpoint is damaged "
                                           << "or came from a diverged run; use an earlier one");
  }
}

void SafeTensors::check_all_finite() const {
  for (const std::string& name : names_) check_finite(name);
}

const char* safetensors_dtype(DType dtype) {
  switch (dtype) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::i32: return "I32";
    case DType::u8: return "U8";
  }
  return "?";
}

namespace {

// Validates the entries, builds the padded header and writes the file; emit(i, sink) writes the
// bytes of entry i.
void write_file(const std::filesystem::path& path, const std::vector<SafeTensorsEntry>& entries,
                const std::map<std::string, std::string>& metadata,
                const std::function<void(size_t, const ByteSink&)>& emit) {
  const std::string f = "write_safetensors '" + path.string() + "'";
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const SafeTensorsEntry& e : entries) {
    const std::string w = f + ": tensor '" + e.name + "'";
    DF_CHECK(!e.name.empty() && e.name != "__metadata__",
             w << ": the name is reserved or empty; fix: give the tensor a proper key");
    DF_CHECK(seen.insert(e.name).second, w << ": the name is given twice; fix: keys must be unique");
    const KindInfo* kind = find_kind(e.dtype);
    DF_CHECK(kind, w << ": unknown dtype \"" << e.dtype << "\"; supported: " << kSafeTensorsDTypes);
    for (int64_t d : e.shape)
      DF_CHECK(d >= 0, w << ": shape " << shape_str(e.shape) << " has a negative dimension");
    const std::optional<uint64_t> bytes = byte_size(e.shape, kind->size);
    DF_CHECK(bytes, w << ": shape " << shape_str(e.shape) << " is too large");
    DF_CHECK(e.data || *bytes == 0, w << ": no data pointer for " << *bytes << " bytes");
    header[e.name] = {{"dtype", kind->name}, {"shape", e.shape}, {"data_offsets", {offset, offset + *bytes}}};
    offset += *bytes;
  }
  if (!metadata.empty()) header["__metadata__"] = metadata;
  std::string text;
  try {
    text = header.dump();
  } catch (const nlohmann::json::exception& e) {
    DF_FAIL(f << ": the header cannot be written (" << e.what() << "); fix: names and metadata must be UTF-8");
  }
  text.append((8 - text.size() % 8) % 8, ' ');
  const uint64_t header_bytes = text.size();
  write_file_atomic(path, [&](const ByteSink& sink) {
    sink(&header_bytes, 8);
    sink(text.data(), text.size());
    for (size_t i = 0; i < entries.size(); ++i) emit(i, sink);
  });
}

}  // namespace

void write_safetensors(const std::filesystem::path& path, const std::vector<SafeTensorsEntry>& entries,
                       const std::map<std::string, std::string>& metadata) {
  write_file(path, entries, metadata, [&](size_t i, const ByteSink& sink) {
    const SafeTensorsEntry& e = entries[i];
    sink(e.data, *byte_size(e.shape, find_kind(e.dtype)->size));
  });
}

void write_safetensors(const std::filesystem::path& path, const std::vector<std::pair<std::string, Tensor>>& tensors,
                       const std::map<std::string, std::string>& metadata) {
  std::vector<SafeTensorsEntry> entries;
  for (const auto& [name, t] : tensors) {
    DF_CHECK(t.defined(), "write_safetensors '" << path.string() << "': tensor '" << name << "' is undefined");
    // A non-null placeholder: the bytes are copied from the tensor while writing.
    entries.push_back({name, safetensors_dtype(t.dtype()), t.shape().vec(), t.raw()});
  }
  write_file(path, entries, metadata, [&](size_t i, const ByteSink& sink) {
    const Tensor& t = tensors[i].second;
    std::vector<uint8_t> host(t.nbytes());
    t.copy_to_host(host.data(), host.size());
    sink(host.data(), host.size());
  });
}

}  // namespace dflash

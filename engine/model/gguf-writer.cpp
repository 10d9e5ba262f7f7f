#include "model/gguf-writer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "core/dtype.h"

namespace spillway {
namespace {

// GGUF is little-endian, as every machine Spillway runs on: values are copied as they are.
template <typename T>
void put(std::string& out, T v) {
  out.append(reinterpret_cast<const char*>(&v), sizeof(T));
}

void put_string(std::string& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  out.append(s.data(), s.size());
}

std::string typed(GgufValueType t) {
  std::string s;
  put<uint32_t>(s, static_cast<uint32_t>(t));
  return s;
}

std::string array_header(GgufValueType element, uint64_t n) {
  std::string s = typed(GgufValueType::kArray);
  put<uint32_t>(s, static_cast<uint32_t>(element));
  put<uint64_t>(s, n);
  return s;
}

uint64_t pad_to(uint64_t n, uint64_t alignment) {
  return (n + alignment - 1) / alignment * alignment;
}

}  // namespace

const char* ggml_type_name(GgmlType t) {
  switch (t) {
    case GgmlType::kF32:
      return "F32";
    case GgmlType::kF16:
      return "F16";
    case GgmlType::kQ8_0:
      return "Q8_0";
    case GgmlType::kBF16:
      return "BF16";
  }
  return "?";
}

uint64_t ggml_nbytes(GgmlType t, int64_t n) {
  switch (t) {
    case GgmlType::kF32:
      return 4 * static_cast<uint64_t>(n);
    case GgmlType::kF16:
    case GgmlType::kBF16:
      return 2 * static_cast<uint64_t>(n);
    case GgmlType::kQ8_0:
      return static_cast<uint64_t>(n / kQ8_0BlockSize) * (2 + kQ8_0BlockSize);
  }
  return 0;
}

void quantize_q8_0(const float* x, int64_t n, uint8_t* out) {
  for (int64_t b = 0; b < n / kQ8_0BlockSize; ++b) {
    const float* v = x + b * kQ8_0BlockSize;
    float amax = 0.0f;
    for (int j = 0; j < kQ8_0BlockSize; ++j) amax = std::max(amax, std::fabs(v[j]));
    const float d = amax / ((1 << 7) - 1);
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    uint8_t* block = out + b * (2 + kQ8_0BlockSize);
    const uint16_t dh = f32_to_f16(d);
    std::memcpy(block, &dh, 2);
    for (int j = 0; j < kQ8_0BlockSize; ++j)
      block[2 + j] = static_cast<uint8_t>(static_cast<int8_t>(std::roundf(v[j] * id)));
  }
}

void encode_ggml(GgmlType t, const float* x, int64_t n, uint8_t* out) {
  switch (t) {
    case GgmlType::kF32:
      std::memcpy(out, x, 4 * static_cast<size_t>(n));
      return;
    case GgmlType::kF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kBF16:
      for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(x[i]);
        std::memcpy(out + 2 * i, &h, 2);
      }
      return;
    case GgmlType::kQ8_0:
      quantize_q8_0(x, n, out);
      return;
  }
}

void GgufWriter::set(const std::string& key, std::string encoded) {
  for (Kv& kv : kv_) {
    if (kv.key == key) {
      kv.encoded = std::move(encoded);
      return;
    }
  }
  kv_.push_back({key, std::move(encoded)});
}

void GgufWriter::set_u32(const std::string& key, uint32_t v) {
  std::string s = typed(GgufValueType::kU32);
  put(s, v);
  set(key, std::move(s));
}
void GgufWriter::set_i32(const std::string& key, int32_t v) {
  std::string s = typed(GgufValueType::kI32);
  put(s, v);
  set(key, std::move(s));
}
void GgufWriter::set_f32(const std::string& key, float v) {
  std::string s = typed(GgufValueType::kF32);
  put(s, v);
  set(key, std::move(s));
}
void GgufWriter::set_bool(const std::string& key, bool v) {
  std::string s = typed(GgufValueType::kBool);
  put<uint8_t>(s, v ? 1 : 0);
  set(key, std::move(s));
}
void GgufWriter::set_string(const std::string& key, std::string_view v) {
  std::string s = typed(GgufValueType::kString);
  put_string(s, v);
  set(key, std::move(s));
}
void GgufWriter::set_string_array(const std::string& key, const std::vector<std::string>& v) {
  std::string s = array_header(GgufValueType::kString, v.size());
  for (const std::string& e : v) put_string(s, e);
  set(key, std::move(s));
}
void GgufWriter::set_f32_array(const std::string& key, const std::vector<float>& v) {
  std::string s = array_header(GgufValueType::kF32, v.size());
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  set(key, std::move(s));
}
void GgufWriter::set_i32_array(const std::string& key, const std::vector<int32_t>& v) {
  std::string s = array_header(GgufValueType::kI32, v.size());
  s.append(reinterpret_cast<const char*>(v.data()), v.size() * 4);
  set(key, std::move(s));
}
void GgufWriter::set_bool_array(const std::string& key, const std::vector<bool>& v) {
  std::string s = array_header(GgufValueType::kBool, v.size());
  for (bool e : v) put<uint8_t>(s, e ? 1 : 0);
  set(key, std::move(s));
}
bool GgufWriter::has(const std::string& key) const {
  return std::any_of(kv_.begin(), kv_.end(), [&](const Kv& kv) { return kv.key == key; });
}

Status GgufWriter::add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type,
                              Values values) {
  if (name.size() >= kGgmlMaxName)
    return invalid_argument("GGUF tensor name '" + name + "' is " + std::to_string(name.size()) +
                            " bytes; ggml allows at most " + std::to_string(kGgmlMaxName - 1));
  for (const Tensor& t : tensors_)
    if (t.name == name) return invalid_argument("GGUF tensor '" + name + "' given twice");
  int64_t n = 1;
  for (int64_t d : ne) {
    if (d <= 0)
      return invalid_argument("GGUF tensor '" + name + "' has a dimension of " + std::to_string(d));
    n *= d;
  }
  if (ne.empty()) return invalid_argument("GGUF tensor '" + name + "' has no dimensions");
  if (type == GgmlType::kQ8_0 && ne[0] % kQ8_0BlockSize != 0)
    return invalid_argument("GGUF tensor '" + name +
                            "': Q8_0 needs a row length that is a "
                            "multiple of 32, this one is " +
                            std::to_string(ne[0]));
  Tensor t{name, std::move(ne), type, std::move(values)};
  t.offset = data_bytes_;
  t.bytes = ggml_nbytes(type, n);
  data_bytes_ = pad_to(data_bytes_ + t.bytes, alignment_);
  tensors_.push_back(std::move(t));
  return {};
}

Status GgufWriter::write(const std::function<Status(const void*, size_t)>& sink) const {
  std::string head;
  put<uint32_t>(head, kGgufMagic);
  put<uint32_t>(head, kGgufVersion);
  put<uint64_t>(head, tensors_.size());
  put<uint64_t>(head, kv_.size());
  for (const Kv& kv : kv_) {
    put_string(head, kv.key);
    head += kv.encoded;
  }
  for (const Tensor& t : tensors_) {
    put_string(head, t.name);
    put<uint32_t>(head, static_cast<uint32_t>(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(head, static_cast<uint64_t>(d));
    put<uint32_t>(head, static_cast<uint32_t>(t.type));
    put<uint64_t>(head, t.offset);
  }
  head.resize(pad_to(head.size(), alignment_), '\0');
  SPW_RETURN_IF_ERROR(sink(head.data(), head.size()));
  std::vector<uint8_t> bytes;
  for (const Tensor& t : tensors_) {
    SPW_ASSIGN_OR_RETURN(std::vector<float> v, t.values());
    int64_t n = 1;
    for (int64_t d : t.ne) n *= d;
    if (static_cast<int64_t>(v.size()) != n)
      return internal_error("GGUF tensor '" + t.name + "' gave " + std::to_string(v.size()) +
                            " values for " + std::to_string(n));
    bytes.assign(pad_to(t.bytes, alignment_), 0);
    encode_ggml(t.type, v.data(), n, bytes.data());
    SPW_RETURN_IF_ERROR(sink(bytes.data(), bytes.size()));
  }
  return {};
}

}  // namespace spillway

// A small GGUF v3 reader for tests, written from ggml's docs/gguf.md independently of
// model/gguf-writer: the header, every metadata value (scalars, strings, arrays), the tensor
// infos and the data section's start. Throws std::runtime_error on a malformed file.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <stdexcept>
#include <string>
#include <variant>
#include <vector>

namespace spillway::testing {

struct GgufValue {
  uint32_t type = 0;          // gguf_type; for an array, kArray (9)
  uint32_t element_type = 0;  // an array's element type
  std::variant<uint64_t, int64_t, double, bool, std::string> scalar;
  std::vector<GgufValue> array;
  uint64_t u() const { return std::get<uint64_t>(scalar); }
  int64_t i() const { return std::get<int64_t>(scalar); }
  double f() const { return std::get<double>(scalar); }
  bool b() const { return std::get<bool>(scalar); }
  const std::string& s() const { return std::get<std::string>(scalar); }
};

struct GgufTensorInfo {
  std::string name;
  std::vector<uint64_t> ne;
  uint32_t type = 0;
  uint64_t offset = 0;  // from the data section
};

struct GgufFile {
  uint32_t version = 0;
  std::vector<std::string> keys;  // in file order
  std::map<std::string, GgufValue> kv;
  std::vector<GgufTensorInfo> tensors;
  uint64_t data_start = 0;  // byte offset of the data section in the file
  std::string bytes;        // the whole file
  const GgufTensorInfo& tensor(const std::string& name) const {
    for (const auto& t : tensors)
      if (t.name == name) return t;
    throw std::runtime_error("no tensor " + name);
  }
  const char* data(const GgufTensorInfo& t) const { return bytes.data() + data_start + t.offset; }
};

inline GgufFile read_gguf(const std::string& path) {
  GgufFile f;
  std::ifstream in(path, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  f.bytes = ss.str();
  size_t pos = 0;
  auto take = [&](void* dst, size_t n) {
    if (pos + n > f.bytes.size())
      throw std::runtime_error("GGUF truncated at " + std::to_string(pos));
    std::memcpy(dst, f.bytes.data() + pos, n);
    pos += n;
  };
  auto u32 = [&] {
    uint32_t v;
    take(&v, 4);
    return v;
  };
  auto u64 = [&] {
    uint64_t v;
    take(&v, 8);
    return v;
  };
  auto str = [&] {
    const uint64_t n = u64();
    if (pos + n > f.bytes.size()) throw std::runtime_error("GGUF string past the end");
    std::string s = f.bytes.substr(pos, n);
    pos += n;
    return s;
  };
  std::function<GgufValue(uint32_t)> value = [&](uint32_t type) {
    GgufValue v;
    v.type = type;
    switch (type) {
      case 0: {
        uint8_t x;
        take(&x, 1);
        v.scalar = uint64_t{x};
        break;
      }
      case 1: {
        int8_t x;
        take(&x, 1);
        v.scalar = int64_t{x};
        break;
      }
      case 2: {
        uint16_t x;
        take(&x, 2);
        v.scalar = uint64_t{x};
        break;
      }
      case 3: {
        int16_t x;
        take(&x, 2);
        v.scalar = int64_t{x};
        break;
      }
      case 4:
        v.scalar = uint64_t{u32()};
        break;
      case 5: {
        int32_t x;
        take(&x, 4);
        v.scalar = int64_t{x};
        break;
      }
      case 6: {
        float x;
        take(&x, 4);
        v.scalar = double{x};
        break;
      }
      case 7: {
        uint8_t x;
        take(&x, 1);
        if (x > 1) throw std::runtime_error("bool not 0/1");
        v.scalar = x == 1;
        break;
      }
      case 8:
        v.scalar = str();
        break;
      case 9: {
        v.element_type = u32();
        const uint64_t n = u64();
        for (uint64_t k = 0; k < n; ++k) v.array.push_back(value(v.element_type));
        break;
      }
      case 10:
        v.scalar = u64();
        break;
      case 11: {
        int64_t x;
        take(&x, 8);
        v.scalar = x;
        break;
      }
      case 12: {
        double x;
        take(&x, 8);
        v.scalar = x;
        break;
      }
      default:
        throw std::runtime_error("unknown GGUF type " + std::to_string(type));
    }
    return v;
  };
  if (u32() != 0x46554747) throw std::runtime_error("not GGUF");
  f.version = u32();
  const uint64_t n_tensors = u64(), n_kv = u64();
  for (uint64_t k = 0; k < n_kv; ++k) {
    std::string key = str();
    const uint32_t type = u32();
    if (f.kv.count(key)) throw std::runtime_error("key twice: " + key);
    f.keys.push_back(key);
    f.kv[key] = value(type);
  }
  for (uint64_t k = 0; k < n_tensors; ++k) {
    GgufTensorInfo t;
    t.name = str();
    const uint32_t dims = u32();
    for (uint32_t d = 0; d < dims; ++d) t.ne.push_back(u64());
    t.type = u32();
    t.offset = u64();
    f.tensors.push_back(t);
  }
  uint64_t alignment = 32;
  if (auto it = f.kv.find("general.alignment"); it != f.kv.end()) alignment = it->second.u();
  f.data_start = (pos + alignment - 1) / alignment * alignment;
  return f;
}

// ggml's dequantize_row_q8_0: per block of 32, an fp16 scale then 32 int8.
inline float test_f16_to_f32(uint16_t h) {
  const uint32_t sign = (h >> 15) & 1, exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
  float v;
  if (exp == 0)
    v = std::ldexp(static_cast<float>(mant), -24);
  else if (exp == 31)
    v = mant ? NAN : INFINITY;
  else
    v = std::ldexp(static_cast<float>(mant | 0x400), static_cast<int>(exp) - 25);
  return sign ? -v : v;
}

}  // namespace spillway::testing

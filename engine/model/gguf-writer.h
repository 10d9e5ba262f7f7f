// GgufWriter: a GGUF v3 file (ggml's docs/gguf.md) built in memory as metadata and tensor
// descriptions, then streamed out: header, metadata key-values, tensor infos, padding to the
// alignment, tensor data (each tensor's offset a multiple of the alignment). llama.cpp,
// Ollama and LM Studio load this format.
//
// Tensor data is produced only while writing, one tensor at a time (each tensor's `values`
// callback gives its float32 values in PyTorch's row-major order), so a model need not be held
// twice in memory. F32 is written as is, F16 as IEEE 754 binary16 (round to nearest even),
// BF16 as torch's bfloat16 rounding, Q8_0 as ggml's quantize_row_q8_0_ref (blocks of 32 along a
// row: an fp16 scale d = amax / 127 and 32 int8 values round(x / d), half away from zero).
//
// A writer is a plain value, not thread-safe; it owns its metadata and the callbacks.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

namespace spillway {

// ggml's tensor types (ggml.h's enum ggml_type) that export writes.
enum class GgmlType : uint32_t { kF32 = 0, kF16 = 1, kQ8_0 = 8, kBF16 = 30 };
// GGUF's metadata value types (gguf.h's enum gguf_type).
enum class GgufValueType : uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};

inline constexpr uint32_t kGgufMagic = 0x46554747;  // "GGUF" read as a little-endian uint32
inline constexpr uint32_t kGgufVersion = 3;
inline constexpr uint32_t kGgufDefaultAlignment = 32;
inline constexpr int64_t kQ8_0BlockSize = 32;  // QK8_0
inline constexpr size_t kGgmlMaxName = 64;     // GGML_MAX_NAME, the terminating NUL included

// "F32", "F16", "Q8_0", "BF16".
const char* ggml_type_name(GgmlType t);
// Bytes of `n` values of type `t` (n a multiple of 32 for Q8_0: 34 bytes per block).
uint64_t ggml_nbytes(GgmlType t, int64_t n);

// ggml's quantize_row_q8_0_ref over `n` values (a multiple of 32): n / 32 blocks of 34 bytes.
void quantize_q8_0(const float* x, int64_t n, uint8_t* out);
// Encodes `n` float32 values as `t` into `out` (ggml_nbytes(t, n) bytes).
void encode_ggml(GgmlType t, const float* x, int64_t n, uint8_t* out);

class GgufWriter {
 public:
  explicit GgufWriter(uint32_t alignment = kGgufDefaultAlignment) : alignment_(alignment) {}

  // Metadata. Setting a key again replaces its value in place (gguf-py's writer does the same,
  // with a warning), so a family may override a key the common part set.
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_f32(const std::string& key, float v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, std::string_view v);
  void set_string_array(const std::string& key, const std::vector<std::string>& v);
  void set_f32_array(const std::string& key, const std::vector<float>& v);
  void set_i32_array(const std::string& key, const std::vector<int32_t>& v);
  void set_bool_array(const std::string& key, const std::vector<bool>& v);
  bool has(const std::string& key) const;
  size_t metadata_count() const { return kv_.size(); }

  // A tensor of ggml shape `ne` (ne[0] the row length, innermost: a PyTorch [out, in] weight is
  // ne = {in, out}). `values` gives its ne[0]·ne[1]·... float32 values when the data is written.
  // kInvalidArgument for a name of 64 bytes or more, a name given twice, a non-positive
  // dimension, or Q8_0 with a row length that is not a multiple of 32.
  using Values = std::function<Result<std::vector<float>>()>;
  Status add_tensor(const std::string& name, std::vector<int64_t> ne, GgmlType type, Values values);
  size_t tensor_count() const { return tensors_.size(); }

  // Streams the whole file into `sink`; a `values` callback's error, or a wrong number of values
  // (kInternal), stops it.
  Status write(const std::function<Status(const void*, size_t)>& sink) const;

 private:
  struct Kv {
    std::string key;
    std::string encoded;  // value type and value, as in the file
  };
  struct Tensor {
    std::string name;
    std::vector<int64_t> ne;
    GgmlType type;
    Values values;
    uint64_t offset = 0;  // from the start of the data section
    uint64_t bytes = 0;
  };
  void set(const std::string& key, std::string encoded);

  uint32_t alignment_;
  std::vector<Kv> kv_;
  std::vector<Tensor> tensors_;
  uint64_t data_bytes_ = 0;  // the data section so far, padding included
};

}  // namespace spillway

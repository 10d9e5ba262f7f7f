// Safetensors: the Hugging Face tensor file format, read through a memory map and written
// atomically.
//
// Format (https://github.com/huggingface/safetensors): 8 bytes little-endian header length N,
// N bytes of JSON {name: {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
// then the data section; offsets are relative to the data section.
//
// SafetensorsFile validates every header field on open — header length against the file size,
// well-formed and bounded JSON, known dtypes, non-negative shapes, offsets inside the data section,
// byte sizes equal to shape × dtype, no overlapping ranges — so that a corrupt or truncated file
// is an error value naming the file and tensor, never a crash. TensorStore puts one file or a
// sharded checkpoint (`model.safetensors.index.json`) behind one name lookup.
// Both are immutable after open, move-only, and safe to read from several threads.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/dtype.h"
#include "core/file-util.h"
#include "core/status.h"

namespace spillway {

// Headers larger than this are refused (the safetensors library uses the same 100 MB bound).
constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t begin = 0;  // byte offsets inside the data section
  uint64_t end = 0;
  size_t file_index = 0;  // which file of a TensorStore holds it

  uint64_t numel() const;
  uint64_t nbytes() const { return end - begin; }
  std::string shape_string() const;  // "[64, 172]"
};

class SafetensorsFile {
 public:
  // Maps and validates `path`. kNotFound when missing; kCorrupt naming the file (and the tensor)
  // for every malformed header; kUnsupported for a dtype outside F32/F16/BF16/I32/I64/U8.
  static Result<SafetensorsFile> open(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  const TensorInfo* find(std::string_view name) const;
  // Pointer to the tensor's bytes inside the map (valid while this object lives).
  const uint8_t* data(const TensorInfo& t) const { return data_ + t.begin; }

 private:
  MappedFile file_;
  const uint8_t* data_ = nullptr;  // start of the data section
  std::vector<TensorInfo> tensors_;
  std::map<std::string, std::string> metadata_;
};

class TensorStore {
 public:
  // `path`: a .safetensors file, a model.safetensors.index.json, or a folder holding either
  // (model.safetensors is preferred). Every shard is opened and validated; a tensor named by the
  // index but missing from its shard is kCorrupt.
  static Result<TensorStore> open(const std::string& path);

  const TensorInfo* find(std::string_view name) const;
  std::vector<const TensorInfo*> tensors() const;  // sorted by name
  const std::string& file_of(const TensorInfo& t) const { return files_[t.file_index].path(); }
  const uint8_t* data(const TensorInfo& t) const { return files_[t.file_index].data(t); }
  size_t file_count() const { return files_.size(); }
  // Copies the tensor into `dst` as float32 (converting F16/BF16); `count` must equal numel.
  Status read_f32(const TensorInfo& t, float* dst, size_t count) const;

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, TensorInfo, std::less<>> index_;
};

// A tensor to write: `data` holds numel(shape) × dtype_size(dtype) bytes.
struct TensorToWrite {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  const void* data = nullptr;
};

// Writes one safetensors file atomically (temp file, fsync, rename, fsync directory): a crash or
// a full disk (kNoSpace) leaves the previous file untouched. Tensors are written in name order,
// the header padded with spaces to a multiple of 8 bytes as the reference writer does. With
// `digests`, the file's digest (core/file-util.h) is appended there. With `fill`, fill(i) runs
// just before tensors[i]'s bytes are written and may fill the memory its `data` points to: a file
// larger than the memory at hand (moments read from the SSD tier a block at a time); its error
// stops the write.
Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata = {{"format", "pt"}},
                         FileDigests* digests = nullptr,
                         const std::function<Status(size_t)>& fill = {});

// Writes `tensors` into `dir` as model.safetensors when they fit in `max_shard_bytes`, else as
// model-0000i-of-0000n.safetensors shards plus model.safetensors.index.json (transformers'
// layout); every file is written atomically, the index last. With `digests`, each file's digest
// is appended there.
Status write_safetensors_sharded(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                 uint64_t max_shard_bytes = 5ull << 30,
                                 FileDigests* digests = nullptr);

// One writer's part of a set of shards that several writers fill in one folder (past one
// machine, each process its own blocks): `tensors` into `<prefix>-00001.safetensors`, ... (a new
// file above `max_shard_bytes`), each atomic, and each tensor's file name into `weight_map`.
// Returns the bytes of tensor data written.
Result<uint64_t> write_safetensors_part(const std::string& dir,
                                        const std::vector<TensorToWrite>& tensors,
                                        uint64_t max_shard_bytes, const std::string& prefix,
                                        std::map<std::string, std::string>* weight_map,
                                        FileDigests* digests = nullptr);

// `<stem>.safetensors.index.json` in `dir`, transformers' layout: {"metadata": {"total_size"},
// "weight_map": {tensor: file}}, atomic. TensorStore::open reads it (a folder's, for the stem
// "model").
Status write_safetensors_index(const std::string& dir, const std::string& stem, uint64_t total_size,
                               const std::map<std::string, std::string>& weight_map,
                               FileDigests* digests = nullptr);

}  // namespace spillway

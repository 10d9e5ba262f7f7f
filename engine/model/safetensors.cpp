#include "model/safetensors.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "core/json-file.h"

namespace spillway {
namespace fs = std::filesystem;

uint64_t TensorInfo::numel() const {
  uint64_t n = 1;
  for (int64_t d : shape) n *= static_cast<uint64_t>(d);
  return n;
}

std::string TensorInfo::shape_string() const {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

namespace {

Status bad(const std::string& path, const std::string& what) {
  return corrupt(path + ": " + what);
}

// Parses one tensor entry of the header; `data_size` bounds the offsets.
Status parse_entry(const std::string& path, const std::string& name, const nlohmann::json& e,
                   uint64_t data_size, TensorInfo* t) {
  const std::string where = "tensor " + quote_name(name) + ": ";
  if (!e.is_object()) return bad(path, where + "header entry is not an object");
  auto dt = e.find("dtype");
  if (dt == e.end() || !dt->is_string()) return bad(path, where + "missing or non-string 'dtype'");
  auto parsed = parse_dtype(dt->get<std::string>());
  if (!parsed) {
    return unsupported(path + ": " + where + "dtype " + quote_name(dt->get<std::string>()) +
                       " is not supported (F32, F16, BF16, I32, I64, U8)");
  }
  auto sh = e.find("shape");
  if (sh == e.end() || !sh->is_array()) return bad(path, where + "missing or non-array 'shape'");
  if (sh->size() > 8) return bad(path, where + "shape has more than 8 dimensions");
  uint64_t numel = 1;
  for (const auto& d : *sh) {
    if (!d.is_number_integer() || d.get<int64_t>() < 0)
      return bad(path, where + "shape holds a non-integer or negative dimension");
    uint64_t v = d.get<uint64_t>();
    if (v != 0 && numel > std::numeric_limits<uint64_t>::max() / v)
      return bad(path, where + "shape overflows");
    numel *= v;
    t->shape.push_back(static_cast<int64_t>(v));
  }
  auto off = e.find("data_offsets");
  if (off == e.end() || !off->is_array() || off->size() != 2 || !(*off)[0].is_number_unsigned() ||
      !(*off)[1].is_number_unsigned()) {
    return bad(path, where + "'data_offsets' must be two non-negative integers");
  }
  t->name = name;
  t->dtype = *parsed;
  t->begin = (*off)[0].get<uint64_t>();
  t->end = (*off)[1].get<uint64_t>();
  if (t->begin > t->end) return bad(path, where + "data_offsets begin > end");
  if (t->end > data_size) {
    return bad(path, where + "data ends at byte " + std::to_string(t->end) +
                         " of the data section, past its end (" + std::to_string(data_size) +
                         " bytes): the file is truncated or the header is wrong");
  }
  // The byte size is checked for overflow too: [2^62] of F32 would wrap to 0 bytes and pass.
  uint64_t expect = 0;
  if (__builtin_mul_overflow(numel, static_cast<uint64_t>(dtype_size(t->dtype)), &expect))
    return bad(path, where + "shape " + t->shape_string() + " of " + dtype_name(t->dtype) +
                         " overflows a 64-bit byte size");
  if (t->nbytes() != expect) {
    return bad(path, where + "shape " + t->shape_string() + " of " + dtype_name(t->dtype) +
                         " needs " + std::to_string(expect) + " bytes but data_offsets span " +
                         std::to_string(t->nbytes()));
  }
  return {};
}

}  // namespace

Result<SafetensorsFile> SafetensorsFile::open(const std::string& path) {
  SafetensorsFile f;
  SPW_ASSIGN_OR_RETURN(f.file_, MappedFile::open(path));
  const uint64_t size = f.file_.size();
  if (size < 8)
    return bad(
        path, "file is " + std::to_string(size) + " bytes, too short for the 8-byte header length");
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | f.file_.data()[i];  // little-endian
  if (n > kMaxSafetensorsHeaderBytes) {
    return bad(path, "header length " + std::to_string(n) + " exceeds the " +
                         std::to_string(kMaxSafetensorsHeaderBytes) + "-byte limit");
  }
  if (n > size - 8) {
    return bad(path, "header length " + std::to_string(n) + " runs past the end of the " +
                         std::to_string(size) + "-byte file (truncated?)");
  }
  const char* header = reinterpret_cast<const char*>(f.file_.data() + 8);
  auto parsed = parse_json(std::string_view(header, n), path + ": header", ErrorCode::kCorrupt);
  if (!parsed.ok()) return parsed.status();
  const nlohmann::json& j = *parsed;
  if (!j.is_object()) return bad(path, "header is not a JSON object");
  const uint64_t data_size = size - 8 - n;
  f.data_ = f.file_.data() + 8 + n;
  for (auto it = j.begin(); it != j.end(); ++it) {
    if (it.key() == "__metadata__") {
      if (!it->is_object()) return bad(path, "__metadata__ is not an object");
      for (auto m = it->begin(); m != it->end(); ++m) {
        if (!m->is_string())
          return bad(path, "__metadata__ value " + quote_name(m.key()) + " is not a string");
        f.metadata_[m.key()] = m->get<std::string>();
      }
      continue;
    }
    TensorInfo t;
    SPW_RETURN_IF_ERROR(parse_entry(path, it.key(), *it, data_size, &t));
    f.tensors_.push_back(std::move(t));
  }
  std::vector<const TensorInfo*> by_offset;
  for (const auto& t : f.tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](auto* a, auto* b) { return a->begin < b->begin; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo* prev = by_offset[i - 1];
    const TensorInfo* cur = by_offset[i];
    if (cur->begin < prev->end && cur->nbytes() > 0 && prev->nbytes() > 0) {
      return bad(path, "tensors " + quote_name(prev->name) + " and " + quote_name(cur->name) +
                           " overlap in the data section");
    }
  }
  return f;
}

const TensorInfo* SafetensorsFile::find(std::string_view name) const {
  for (const auto& t : tensors_) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<TensorStore> TensorStore::open(const std::string& path) {
  TensorStore store;
  std::error_code ec;
  std::string index_path;
  std::vector<std::string> files;
  if (fs::is_directory(path, ec)) {
    if (fs::exists(fs::path(path) / "model.safetensors")) {
      files.push_back((fs::path(path) / "model.safetensors").string());
    } else if (fs::exists(fs::path(path) / "model.safetensors.index.json")) {
      index_path = (fs::path(path) / "model.safetensors.index.json").string();
    } else {
      return not_found(
          path +
          ": no model.safetensors or model.safetensors.index.json (only safetensors "
          "weights are read; convert .bin checkpoints with transformers' save_pretrained)");
    }
  } else if (path.size() > 11 && path.ends_with(".index.json")) {
    index_path = path;
  } else {
    files.push_back(path);
  }

  std::map<std::string, std::string> expected;  // tensor -> shard, from the index
  if (!index_path.empty()) {
    SPW_ASSIGN_OR_RETURN(nlohmann::json j, read_json_file(index_path, ErrorCode::kCorrupt));
    if (!j.is_object()) return corrupt(index_path + ": not a JSON object");
    auto wm = j.find("weight_map");
    if (wm == j.end() || !wm->is_object())
      return corrupt(index_path + ": missing 'weight_map' object");
    std::vector<std::string> shards;
    for (auto it = wm->begin(); it != wm->end(); ++it) {
      if (!it->is_string())
        return corrupt(index_path + ": weight_map entry " + quote_name(it.key()) +
                       " is not a file name");
      std::string shard = it->get<std::string>();
      if (shard.find('/') != std::string::npos)
        return corrupt(index_path + ": shard name " + quote_name(shard) +
                       " must be a plain file name");
      expected[it.key()] = shard;
      if (std::find(shards.begin(), shards.end(), shard) == shards.end()) shards.push_back(shard);
    }
    std::sort(shards.begin(), shards.end());
    for (const auto& s : shards) files.push_back((fs::path(index_path).parent_path() / s).string());
  }

  for (size_t i = 0; i < files.size(); ++i) {
    auto f = SafetensorsFile::open(files[i]);
    if (!f.ok()) return f.status();
    for (const TensorInfo& t : f->tensors()) {
      TensorInfo copy = t;
      copy.file_index = i;
      auto [it, inserted] = store.index_.emplace(t.name, copy);
      if (!inserted)
        return corrupt(files[i] + ": tensor " + quote_name(t.name) + " also appears in " +
                       files[it->second.file_index]);
    }
    store.files_.push_back(std::move(*f));
  }
  for (const auto& [name, shard] : expected) {
    auto it = store.index_.find(name);
    if (it == store.index_.end())
      return corrupt(index_path + ": tensor " + quote_name(name) + " is listed in shard " +
                     quote_name(shard) + " but missing from it");
    if (fs::path(store.files_[it->second.file_index].path()).filename() != shard)
      return corrupt(index_path + ": tensor " + quote_name(name) + " is listed in " +
                     quote_name(shard) + " but found in another shard");
  }
  return store;
}

const TensorInfo* TensorStore::find(std::string_view name) const {
  auto it = index_.find(name);
  return it == index_.end() ? nullptr : &it->second;
}

std::vector<const TensorInfo*> TensorStore::tensors() const {
  std::vector<const TensorInfo*> out;
  for (const auto& [name, t] : index_) out.push_back(&t);
  return out;
}

Status TensorStore::read_f32(const TensorInfo& t, float* dst, size_t count) const {
  if (count != t.numel()) {
    return invalid_argument("tensor '" + t.name + "': caller expects " + std::to_string(count) +
                            " elements, file has " + std::to_string(t.numel()));
  }
  if (t.dtype != DType::kF32 && t.dtype != DType::kF16 && t.dtype != DType::kBF16) {
    return unsupported(file_of(t) + ": tensor '" + t.name + "' has dtype " + dtype_name(t.dtype) +
                       "; weights must be F32, F16 or BF16");
  }
  convert_to_f32(data(t), t.dtype, dst, count);
  return {};
}

namespace {

std::string build_header(const std::vector<const TensorToWrite*>& sorted,
                         const std::map<std::string, std::string>& metadata, uint64_t* data_bytes) {
  nlohmann::ordered_json h;
  if (!metadata.empty()) h["__metadata__"] = metadata;
  uint64_t off = 0;
  for (const TensorToWrite* t : sorted) {
    uint64_t n = dtype_size(t->dtype);
    for (int64_t d : t->shape) n *= static_cast<uint64_t>(d);
    h[t->name] = {
        {"dtype", dtype_name(t->dtype)}, {"shape", t->shape}, {"data_offsets", {off, off + n}}};
    off += n;
  }
  *data_bytes = off;
  std::string s = h.dump();
  while (s.size() % 8 != 0) s.push_back(' ');
  return s;
}

uint64_t tensor_bytes(const TensorToWrite& t) {
  uint64_t n = dtype_size(t.dtype);
  for (int64_t d : t.shape) n *= static_cast<uint64_t>(d);
  return n;
}

}  // namespace

Status write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                         const std::map<std::string, std::string>& metadata, FileDigests* digests,
                         const std::function<Status(size_t)>& fill) {
  std::vector<const TensorToWrite*> sorted;
  for (const auto& t : tensors) sorted.push_back(&t);
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  for (size_t i = 1; i < sorted.size(); ++i) {
    if (sorted[i]->name == sorted[i - 1]->name)
      return invalid_argument("write_safetensors: duplicate tensor '" + sorted[i]->name + "'");
  }
  uint64_t data_bytes = 0;
  std::string header = build_header(sorted, metadata, &data_bytes);
  return write_file_atomic_stream(
      path,
      [&](const auto& write) -> Status {
        uint8_t len[8];
        uint64_t n = header.size();
        for (int i = 0; i < 8; ++i) len[i] = static_cast<uint8_t>(n >> (8 * i));
        SPW_RETURN_IF_ERROR(write(len, 8));
        SPW_RETURN_IF_ERROR(write(header.data(), header.size()));
        for (const TensorToWrite* t : sorted) {
          if (fill) SPW_RETURN_IF_ERROR(fill(static_cast<size_t>(t - tensors.data())));
          SPW_RETURN_IF_ERROR(write(t->data, tensor_bytes(*t)));
        }
        return Status();
      },
      digests);
}

namespace {

// `tensors` in name order, cut into shards of at most `max_shard_bytes` (a tensor larger than
// that alone in its shard); the bytes of them all in `total`.
std::vector<std::vector<TensorToWrite>> split_shards(const std::vector<TensorToWrite>& tensors,
                                                     uint64_t max_shard_bytes, uint64_t* total) {
  std::vector<const TensorToWrite*> sorted;
  *total = 0;
  for (const auto& t : tensors) {
    sorted.push_back(&t);
    *total += tensor_bytes(t);
  }
  std::sort(sorted.begin(), sorted.end(), [](auto* a, auto* b) { return a->name < b->name; });
  std::vector<std::vector<TensorToWrite>> shards(1);
  uint64_t in_shard = 0;
  for (const TensorToWrite* t : sorted) {
    uint64_t b = tensor_bytes(*t);
    if (!shards.back().empty() && in_shard + b > max_shard_bytes) {
      shards.emplace_back();
      in_shard = 0;
    }
    shards.back().push_back(*t);
    in_shard += b;
  }
  return shards;
}

}  // namespace

Status write_safetensors_index(const std::string& dir, const std::string& stem, uint64_t total_size,
                               const std::map<std::string, std::string>& weight_map,
                               FileDigests* digests) {
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total_size}};
  index["weight_map"] = nlohmann::ordered_json::object();
  for (const auto& [tensor, file] : weight_map) index["weight_map"][tensor] = file;
  return write_file_atomic((fs::path(dir) / (stem + ".safetensors.index.json")).string(),
                           index.dump(2) + "\n", digests);
}

Result<uint64_t> write_safetensors_part(const std::string& dir,
                                        const std::vector<TensorToWrite>& tensors,
                                        uint64_t max_shard_bytes, const std::string& prefix,
                                        std::map<std::string, std::string>* weight_map,
                                        FileDigests* digests) {
  uint64_t total = 0;
  const auto shards = split_shards(tensors, max_shard_bytes, &total);
  char name[32];
  for (size_t i = 0; i < shards.size(); ++i) {
    if (shards[i].empty()) continue;  // no tensors at all
    std::snprintf(name, sizeof(name), "-%05zu.safetensors", i + 1);
    const std::string file = prefix + name;
    SPW_RETURN_IF_ERROR(
        write_safetensors((fs::path(dir) / file).string(), shards[i], {{"format", "pt"}}, digests));
    for (const auto& t : shards[i]) (*weight_map)[t.name] = file;
  }
  return total;
}

Status write_safetensors_sharded(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                                 uint64_t max_shard_bytes, FileDigests* digests) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return io_error("cannot create " + dir + ": " + ec.message());
  uint64_t total = 0;
  const auto shards = split_shards(tensors, max_shard_bytes, &total);
  if (shards.size() == 1) {
    fs::remove(fs::path(dir) / "model.safetensors.index.json",
               ec);  // a stale index would shadow nothing, but mislead
    return write_safetensors((fs::path(dir) / "model.safetensors").string(), shards[0],
                             {{"format", "pt"}}, digests);
  }
  fs::remove(fs::path(dir) / "model.safetensors", ec);  // the reader prefers it over an index
  std::map<std::string, std::string> weight_map;
  char name[64];
  for (size_t i = 0; i < shards.size(); ++i) {
    std::snprintf(name, sizeof(name), "model-%05zu-of-%05zu.safetensors", i + 1, shards.size());
    SPW_RETURN_IF_ERROR(
        write_safetensors((fs::path(dir) / name).string(), shards[i], {{"format", "pt"}}, digests));
    for (const auto& t : shards[i]) weight_map[t.name] = name;
  }
  return write_safetensors_index(dir, "model", total, weight_map, digests);
}

}  // namespace spillway

#include "model/safetensors.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "test-data.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;

// Writes a raw safetensors file: 8-byte length `declared_len` (defaults to the header's size),
// the header text, then `data_bytes` bytes of data.
std::string write_raw(const testing::TempDir& dir, const std::string& header, size_t data_bytes,
                      int64_t declared_len = -1, const std::string& name = "bad.safetensors") {
  std::string path = (fs::path(dir.path()) / name).string();
  std::ofstream f(path, std::ios::binary);
  uint64_t n = declared_len < 0 ? header.size() : static_cast<uint64_t>(declared_len);
  for (int i = 0; i < 8; ++i) f.put(static_cast<char>(n >> (8 * i)));
  f << header;
  std::string data(data_bytes, '\x01');
  f << data;
  return path;
}

struct CorruptCase {
  const char* kind;
  std::string header;
  size_t data_bytes;
  int64_t declared_len;
  ErrorCode code;
  const char* message_part;  // the error must say this
};

class CorruptFiles : public ::testing::TestWithParam<CorruptCase> {};

TEST_P(CorruptFiles, ClearErrorNamingFileAndTensor) {
  testing::TempDir dir;
  const CorruptCase& c = GetParam();
  std::string path = write_raw(dir, c.header, c.data_bytes, c.declared_len);
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok()) << c.kind;
  EXPECT_EQ(f.status().code(), c.code) << c.kind << ": " << f.status().to_string();
  EXPECT_NE(f.status().message().find(path), std::string::npos) << f.status().message();
  EXPECT_NE(f.status().message().find(c.message_part), std::string::npos)
      << c.kind << ": " << f.status().message();
  // The store API gives the same error.
  EXPECT_FALSE(TensorStore::open(path).ok());
}

const std::string kOk = R"({"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})";

INSTANTIATE_TEST_SUITE_P(
    Kinds, CorruptFiles,
    ::testing::Values(
        CorruptCase{"header_too_long_for_file", kOk, 24, 4096, ErrorCode::kCorrupt,
                    "runs past the end"},
        CorruptCase{"header_over_limit", kOk, 24, int64_t(1) << 40, ErrorCode::kCorrupt, "exceeds"},
        CorruptCase{"not_json", "{\"a\": {\"dtype\": ", 24, -1, ErrorCode::kCorrupt,
                    "bad.safetensors: header:1:17: not valid JSON"},
        CorruptCase{"not_object", "[1, 2, 3]", 24, -1, ErrorCode::kCorrupt, "not a JSON object"},
        CorruptCase{"bad_dtype", R"({"a":{"dtype":"F8_E4M3","shape":[2,3],"data_offsets":[0,6]}})",
                    6, -1, ErrorCode::kUnsupported, "tensor 'a': dtype 'F8_E4M3'"},
        CorruptCase{"shape_size_mismatch",
                    R"({"a":{"dtype":"F32","shape":[2,4],"data_offsets":[0,24]}})", 24, -1,
                    ErrorCode::kCorrupt, "tensor 'a': shape [2, 4] of F32 needs 32 bytes"},
        CorruptCase{"offsets_past_end", kOk, 20, -1, ErrorCode::kCorrupt,
                    "tensor 'a': data ends at byte 24"},
        CorruptCase{
            "overlap",
            R"({"a":{"dtype":"F32","shape":[4],"data_offsets":[0,16]},"b":{"dtype":"F32","shape":[4],"data_offsets":[8,24]}})",
            24, -1, ErrorCode::kCorrupt, "'a' and 'b' overlap"},
        CorruptCase{"begin_after_end", R"({"a":{"dtype":"F32","shape":[0],"data_offsets":[8,4]}})",
                    24, -1, ErrorCode::kCorrupt, "begin > end"},
        CorruptCase{"negative_dim", R"({"a":{"dtype":"F32","shape":[-2,3],"data_offsets":[0,24]}})",
                    24, -1, ErrorCode::kCorrupt, "negative"},
        CorruptCase{"missing_offsets", R"({"a":{"dtype":"F32","shape":[2,3]}})", 24, -1,
                    ErrorCode::kCorrupt, "data_offsets"},
        CorruptCase{"missing_dtype", R"({"a":{"shape":[2,3],"data_offsets":[0,24]}})", 24, -1,
                    ErrorCode::kCorrupt, "'dtype'"},
        CorruptCase{
            "bad_metadata",
            R"({"__metadata__":{"format":3},"a":{"dtype":"F32","shape":[2,3],"data_offsets":[0,24]}})",
            24, -1, ErrorCode::kCorrupt, "__metadata__"},
        CorruptCase{"entry_not_object", R"({"a":[1,2]})", 24, -1, ErrorCode::kCorrupt,
                    "tensor 'a'"},
        // 2^62 elements of 4 bytes wrap to a byte size of 0, which matched the empty data_offsets.
        CorruptCase{"byte_size_overflows",
                    R"({"a":{"dtype":"F32","shape":[4611686018427387904],"data_offsets":[0,0]}})",
                    24, -1, ErrorCode::kCorrupt, "overflows a 64-bit byte size"}),
    [](const auto& info) { return std::string(info.param.kind); });

TEST(Safetensors, FileShorterThanLength) {
  testing::TempDir dir;
  std::string path = (fs::path(dir.path()) / "short.safetensors").string();
  std::ofstream(path) << "abc";
  auto f = SafetensorsFile::open(path);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("too short"), std::string::npos);
  auto missing = SafetensorsFile::open(path + ".nope");
  EXPECT_EQ(missing.status().code(), ErrorCode::kNotFound);
}

TEST(Safetensors, TruncatedRealModel) {
  SPILLWAY_REQUIRE_DATA();
  testing::TempDir dir;
  std::string src = testing::data_path("models/stories260K/model.safetensors");
  std::string dst = (fs::path(dir.path()) / "model.safetensors").string();
  fs::copy_file(src, dst);
  fs::resize_file(dst, fs::file_size(src) / 2);
  auto f = SafetensorsFile::open(dst);
  ASSERT_FALSE(f.ok());
  EXPECT_NE(f.status().message().find("past its end"), std::string::npos) << f.status().message();
}

TEST(Safetensors, WriteReadRoundTripWithConversions) {
  testing::TempDir dir;
  std::vector<float> a = {1.5f, -2.25f, 3.0f, 0.1f, 7.0f, -0.0f};
  std::vector<uint16_t> b(5), h(3);
  for (size_t i = 0; i < b.size(); ++i) b[i] = f32_to_bf16(0.5f * i - 1.0f);
  for (size_t i = 0; i < h.size(); ++i) h[i] = f32_to_f16(0.25f * i);
  std::string path = (fs::path(dir.path()) / "x.safetensors").string();
  ASSERT_TRUE(write_safetensors(path, {{"w.a", DType::kF32, {2, 3}, a.data()},
                                       {"w.b", DType::kBF16, {5}, b.data()},
                                       {"w.h", DType::kF16, {3, 1}, h.data()}})
                  .ok());
  auto store = TensorStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  ASSERT_EQ(store->tensors().size(), 3u);
  std::vector<float> out(6);
  ASSERT_TRUE(store->read_f32(*store->find("w.a"), out.data(), 6).ok());
  EXPECT_EQ(out, a);
  ASSERT_TRUE(store->read_f32(*store->find("w.b"), out.data(), 5).ok());
  for (size_t i = 0; i < 5; ++i) EXPECT_FLOAT_EQ(out[i], 0.5f * i - 1.0f);
  ASSERT_TRUE(store->read_f32(*store->find("w.h"), out.data(), 3).ok());
  EXPECT_FLOAT_EQ(out[2], 0.5f);
  EXPECT_FALSE(store->read_f32(*store->find("w.h"), out.data(), 4).ok());
  // header is 8-byte aligned, as the reference writer pads it
  std::ifstream f(path, std::ios::binary);
  uint64_t n = 0;
  f.read(reinterpret_cast<char*>(&n), 8);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(store->find("w.a")->begin % 4, 0u);
}

// The format does not require the header to be padded: a file whose header has an odd length puts
// every tensor at an odd address of the mapping. An F16 or BF16 read from there was an unaligned
// uint16_t load (UB; fuzzing found it under UBSan); it must read the same values as an aligned one.
TEST(Safetensors, UnpaddedHeaderPutsTensorsAtOddAddresses) {
  testing::TempDir dir;
  std::string header =
      R"({"b":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"h":{"dtype":"F16","shape":[1],"data_offsets":[4,6]}})";
  if (header.size() % 2 == 0) header += ' ';
  const std::string path = (fs::path(dir.path()) / "odd.safetensors").string();
  {
    std::ofstream f(path, std::ios::binary);
    for (int i = 0; i < 8; ++i) f.put(static_cast<char>(uint64_t{header.size()} >> (8 * i)));
    // bf16 1.0 (0x3F80), bf16 -2.0 (0xC000), f16 0.5 (0x3800), little-endian
    f << header << std::string("\x80\x3F\x00\xC0\x00\x38", 6);
  }
  auto store = TensorStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const TensorInfo& b = *store->find("b");
  ASSERT_EQ(reinterpret_cast<uintptr_t>(store->data(b)) % 2, 1u) << "the test needs an odd address";
  std::vector<float> out(2);
  ASSERT_TRUE(store->read_f32(b, out.data(), 2).ok());
  EXPECT_EQ(out, (std::vector<float>{1.0f, -2.0f}));
  ASSERT_TRUE(store->read_f32(*store->find("h"), out.data(), 1).ok());
  EXPECT_EQ(out[0], 0.5f);
}

// An empty tensor reads as nothing, into no buffer (fuzzing found memcpy given a null pointer).
TEST(Safetensors, EmptyTensorReadsIntoNoBuffer) {
  testing::TempDir dir;
  const std::string path = (fs::path(dir.path()) / "e.safetensors").string();
  const float one = 1;
  ASSERT_TRUE(write_safetensors(
                  path, {{"empty", DType::kF32, {0, 4}, &one}, {"bf", DType::kBF16, {0}, &one}})
                  .ok());
  auto store = TensorStore::open(path);
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  for (const char* name : {"empty", "bf"}) {
    std::vector<float> none;
    EXPECT_TRUE(store->read_f32(*store->find(name), none.data(), 0).ok()) << name;
  }
}

TEST(Safetensors, ShardedWriteAndIndexRead) {
  testing::TempDir dir;
  std::vector<std::vector<float>> data;
  std::vector<TensorToWrite> tensors;
  for (int i = 0; i < 7; ++i) data.emplace_back(100 + i, float(i));
  for (int i = 0; i < 7; ++i)
    tensors.push_back({"t" + std::to_string(i), DType::kF32, {100 + i}, data[i].data()});
  ASSERT_TRUE(write_safetensors_sharded(dir.path(), tensors, 1000).ok());
  EXPECT_TRUE(fs::exists(fs::path(dir.path()) / "model.safetensors.index.json"));
  EXPECT_FALSE(fs::exists(fs::path(dir.path()) / "model.safetensors"));
  auto store = TensorStore::open(dir.path());
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  EXPECT_GT(store->file_count(), 2u);
  for (int i = 0; i < 7; ++i) {
    const TensorInfo* t = store->find("t" + std::to_string(i));
    ASSERT_NE(t, nullptr);
    std::vector<float> out(t->numel());
    ASSERT_TRUE(store->read_f32(*t, out.data(), out.size()).ok());
    EXPECT_EQ(out, data[i]);
  }
  // A shard that lost a tensor named by the index is an error naming both.
  std::string shard = (fs::path(dir.path()) / "model-00001-of-00004.safetensors").string();
  ASSERT_TRUE(fs::exists(shard));
  ASSERT_TRUE(write_safetensors(shard, {tensors[0]}).ok());
  auto broken = TensorStore::open(dir.path());
  ASSERT_FALSE(broken.ok());
  EXPECT_NE(broken.status().message().find("missing from it"), std::string::npos)
      << broken.status().message();
}

TEST(Safetensors, FailedWriteKeepsOldFile) {
  testing::TempDir dir;
  std::string path = (fs::path(dir.path()) / "keep.safetensors").string();
  std::vector<float> a(4, 1.0f);
  ASSERT_TRUE(write_safetensors(path, {{"a", DType::kF32, {4}, a.data()}}).ok());
  // A duplicate name is refused before anything touches the disk.
  EXPECT_FALSE(write_safetensors(
                   path, {{"a", DType::kF32, {4}, a.data()}, {"a", DType::kF32, {4}, a.data()}})
                   .ok());
  EXPECT_FALSE(
      write_safetensors("/nonexistent-dir/x.safetensors", {{"a", DType::kF32, {4}, a.data()}})
          .ok());
  auto store = TensorStore::open(path);
  ASSERT_TRUE(store.ok());
  EXPECT_NE(store->find("a"), nullptr);
  size_t files = 0;
  for (auto& e : fs::directory_iterator(dir.path())) files += e.is_regular_file();
  EXPECT_EQ(files, 1u);  // no temp files left behind
}

}  // namespace
}  // namespace spillway

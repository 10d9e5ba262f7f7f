// The families Spillway's engine gains in issue 27 (Qwen3, Gemma 3 with and without its linear RoPE
// scaling, Phi-3 with and without LongRoPE), against llama.cpp's
// convert_hf_to_gguf.py on a tiny random model of each (tests/gguf/golden, written by
// tests/gguf/make_family_goldens.py): from the same config.json and tokenizer, GGUF export's
// metadata equals convert's key for key (token arrays by length and SHA-256), and each Hugging
// Face tensor gets convert's GGUF name, type class (F32 or the file's type) and transformation.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "core/sha256.h"
#include "data/gguf-vocab.h"
#include "gguf-reader.h"
#include "model/gguf-arch.h"
#include "test-data.h"

namespace spillway {
namespace {
using nlohmann::json;

json golden(const std::string& family) {
  auto text = read_file(std::string(SPILLWAY_GGUF_GOLDEN_DIR) + "/" + family + ".json");
  EXPECT_TRUE(text.ok()) << text.status().to_string();
  return json::parse(*text);
}

// Python's json.dumps(list, ensure_ascii=False), as the golden hashed it.
std::string python_json_list(const std::vector<testing::GgufValue>& values) {
  std::string s = "[";
  for (size_t i = 0; i < values.size(); ++i) {
    if (i) s += ", ";
    const auto& v = values[i];
    if (v.type == 8)
      s += json(v.s()).dump();
    else if (v.type == 6)
      s += json(v.f()).dump();
    else if (v.type == 4 || v.type == 10)
      s += std::to_string(v.u());
    else
      s += std::to_string(v.i());
  }
  return s + "]";
}

class GgufFamilyGoldenTest : public ::testing::TestWithParam<const char*> {};

TEST_P(GgufFamilyGoldenTest, MetadataAndTensorsAsConvertWritesThem) {
  SPILLWAY_REQUIRE_DATA();
  const json g = golden(GetParam());
  const json& hp = g["config"];
  auto arch = gguf_architecture(hp["architectures"][0].get<std::string>());
  ASSERT_TRUE(arch.ok()) << arch.status().to_string();
  EXPECT_EQ(*arch, g["metadata"]["general.architecture"]);

  GgufWriter w;
  w.set_string("general.architecture", *arch);
  w.set_string("general.type", "model");
  ASSERT_TRUE(set_gguf_hparams(*arch, hp, GgufFileType::kMostlyF16, w).ok());
  auto extra = gguf_extra_tensors(*arch, hp, w);
  ASSERT_TRUE(extra.ok()) << extra.status().to_string();
  // Computed tensors (Phi-3's LongRoPE factors): convert's names and float32 values.
  ASSERT_EQ(extra->size(), g["extra_tensors"].size());
  for (const GgufExtraTensor& t : *extra) {
    ASSERT_TRUE(g["extra_tensors"].contains(t.name)) << t.name;
    EXPECT_EQ(t.values, g["extra_tensors"][t.name].get<std::vector<float>>()) << t.name;
  }
  auto vocab = set_gguf_vocab(*arch, hp, testing::data_path(g["tokenizer"]), w);
  ASSERT_TRUE(vocab.ok()) << vocab.status().to_string();
  w.set_u32("general.quantization_version", 2);
  testing::TempDir tmp;
  std::string bytes;
  ASSERT_TRUE(w.write([&](const void* p, size_t n) {
                 bytes.append(static_cast<const char*>(p), n);
                 return Status();
               }).ok());
  std::ofstream(tmp.path() + "/g.gguf", std::ios::binary) << bytes;
  const auto f = testing::read_gguf(tmp.path() + "/g.gguf");

  // Where Spillway deliberately differs: convert writes Gemma's add_space_prefix false whatever
  // the tokenizer.model says; these goldens use Llama 2's, which adds the prefix
  // (GgufVocabTest.GemmaSpacePrefixIsTheTokenizerModels).
  json metadata = g["metadata"];
  if (*arch == "gemma3") metadata["tokenizer.ggml.add_space_prefix"] = true;
  std::set<std::string> ours(f.keys.begin(), f.keys.end()), theirs;
  for (const auto& [key, want] : metadata.items()) {
    theirs.insert(key);
    auto it = f.kv.find(key);
    if (it == f.kv.end()) {
      ADD_FAILURE() << key << " missing; convert wrote " << want.dump().substr(0, 80);
      continue;
    }
    const testing::GgufValue& v = it->second;
    if (want.is_object()) {  // a long array: its length and SHA-256
      EXPECT_EQ(v.array.size(), want["length"].get<size_t>()) << key;
      EXPECT_EQ(sha256_hex(python_json_list(v.array)), want["sha256"]) << key;
    } else if (want.is_string()) {
      EXPECT_EQ(v.s(), want.get<std::string>()) << key;
    } else if (want.is_boolean()) {
      EXPECT_EQ(v.b(), want.get<bool>()) << key;
    } else if (want.is_number_float()) {
      EXPECT_EQ(static_cast<float>(v.f()), want.get<float>()) << key;
    } else {
      EXPECT_EQ(v.type == 5 ? static_cast<int64_t>(v.i()) : static_cast<int64_t>(v.u()),
                want.get<int64_t>())
          << key;
    }
  }
  for (const std::string& k : ours) EXPECT_TRUE(theirs.count(k)) << k << " is not convert's";

  for (const json& t : g["tensors"]) {
    auto m = gguf_tensor_name(*arch, hp, t["hf"].get<std::string>());
    ASSERT_TRUE(m.ok()) << m.status().to_string();
    EXPECT_EQ(m->name, t["gguf"]) << t["hf"];
    const std::string transform = t["transform"];
    EXPECT_EQ(m->transform, transform == "add_one" ? GgufTransform::kAddOne : GgufTransform::kNone)
        << t["hf"];
    EXPECT_EQ(gguf_keeps_f32(m->name, t["ne"].size()), t["type"] == "F32") << t["hf"];
  }
}

INSTANTIATE_TEST_SUITE_P(Families, GgufFamilyGoldenTest,
                         ::testing::Values("qwen3", "gemma3", "gemma3-linear", "phi3",
                                           "phi3-longrope"));

}  // namespace
}  // namespace spillway

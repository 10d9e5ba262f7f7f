// `spillway-worker export --format gguf` end to end: a checkpoint of stories260K (one training
// step) exported as model.gguf and an Ollama Modelfile, listed in the export manifest, replacing an
// earlier export but never a folder holding a user's file; bad --format / --type are exit 2.
// (The comparison with llama.cpp itself is tests/gguf/roundtrip.py, outside CI.)
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/dtype.h"
#include "core/file-util.h"
#include "gguf-reader.h"
#include "model/safetensors.h"
#include "test-data.h"
#include "worker-process.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;

class GgufExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    tmp_ = new testing::TempDir();
    env_ = {"XDG_DATA_HOME=" + tmp_->path() + "/xdg", "OPENBLAS_NUM_THREADS=1",
            "OPENBLAS_THREAD_TIMEOUT=4"};
    const std::string run_dir = tmp_->path() + "/run";
    const json job = {{"name", "gguf"},
                      {"model", {{"path", testing::data_path("models/stories260K")}}},
                      {"data",
                       {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")},
                        {"seq_len", 32},
                        {"seed", 1}}},
                      {"train", {{"steps", 1}, {"micro_batch_size", 2}, {"eval_every", 0}}},
                      {"placement", {{"backend", "cpu"}}},
                      {"output", {{"run_dir", run_dir}}}};
    std::ofstream(tmp_->path() + "/job.json") << job.dump(2);
    auto r = testing::run_worker_process({"train", tmp_->path() + "/job.json"}, env_, tmp_->path());
    ASSERT_EQ(r.exit_code, 0) << r.err;
    checkpoint_ = run_dir + "/checkpoints/step-000001";
  }
  static void TearDownTestSuite() { delete tmp_; }
  testing::ProcessResult worker(const std::vector<std::string>& args) {
    return testing::run_worker_process(args, env_, tmp_->path());
  }
  static inline testing::TempDir* tmp_ = nullptr;
  static inline std::vector<std::string> env_;
  static inline std::string checkpoint_;
};

TEST_F(GgufExportTest, WritesGgufModelfileAndManifest) {
  const std::string out = tmp_->path() + "/gguf-q8";
  auto r = worker({"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf",
                   "--type", "q8_0", "--json"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const json j = json::parse(r.out);
  EXPECT_EQ(j["format"], "gguf");
  EXPECT_EQ(j["type"], "q8_0");
  EXPECT_EQ(j["architecture"], "llama");
  EXPECT_EQ(j["tokenizer_model"], "llama");
  EXPECT_EQ(j["step"], 1);
  EXPECT_EQ(j["tensors"], 47);       // embedding, 5 layers of 9, final norm (tied head)
  ASSERT_EQ(j["notes"].size(), 1u);  // ffn_down's rows of 172 fall back to F16
  EXPECT_NE(j["notes"][0].get<std::string>().find("5 tensors"), std::string::npos);

  // The folder: the GGUF, the Modelfile and the manifest naming both, nothing else.
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(out)) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  EXPECT_EQ(names, (std::vector<std::string>{"Modelfile", "model.gguf", "spillway-export.json"}));
  const json manifest = json::parse(*read_file(out + "/spillway-export.json"));
  EXPECT_EQ(manifest["written_by"], "spillway");
  EXPECT_EQ(manifest["files"], (json{"Modelfile", "model.gguf"}));
  const std::string modelfile = *read_file(out + "/Modelfile");
  EXPECT_NE(modelfile.find("\nFROM ./model.gguf\n"), std::string::npos) << modelfile;
  EXPECT_NE(modelfile.find("PARAMETER stop \"</s>\"\n"), std::string::npos) << modelfile;

  const auto f = testing::read_gguf(out + "/model.gguf");
  EXPECT_EQ(f.version, 3u);
  EXPECT_EQ(f.kv.at("general.architecture").s(), "llama");
  EXPECT_EQ(f.kv.at("general.file_type").u(), 7u);  // LLAMA_FTYPE_MOSTLY_Q8_0
  EXPECT_EQ(f.kv.at("llama.block_count").u(), 5u);
  EXPECT_EQ(f.kv.at("llama.attention.head_count_kv").u(), 4u);
  EXPECT_EQ(f.kv.at("tokenizer.ggml.tokens").array.size(), 512u);
  EXPECT_EQ(f.tensor("token_embd.weight").type, 8u);
  EXPECT_EQ(f.tensor("token_embd.weight").ne, (std::vector<uint64_t>{64, 512}));
  EXPECT_EQ(f.tensor("blk.4.attn_k.weight").ne, (std::vector<uint64_t>{64, 32}));
  EXPECT_EQ(f.tensor("blk.0.attn_norm.weight").type, 0u);       // norms stay F32
  EXPECT_EQ(f.tensor("blk.0.ffn_down.weight").type, 1u);        // 172 % 32 != 0: F16
  EXPECT_THROW(f.tensor("output.weight"), std::runtime_error);  // tied to the embedding
  for (const auto& t : f.tensors) EXPECT_EQ(t.offset % 32, 0u) << t.name;

  // A second export replaces the first (its files are Spillway's): now F16.
  r = worker({"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_NE(r.out.find("(f16, llama.cpp architecture llama"), std::string::npos) << r.out;
  EXPECT_EQ(testing::read_gguf(out + "/model.gguf").kv.at("general.file_type").u(), 1u);
}

// The values: the checkpoint's float32 weights as F16 (IEEE round to nearest even), Llama's q and k
// rows interleaved per head as convert's LlamaModel.permute does (written out here by index), v and
// the norms as they are (norms exactly, in F32).
TEST_F(GgufExportTest, F16ValuesAreTheCheckpointsWithQAndKPermuted) {
  const std::string out = tmp_->path() + "/gguf-f16";
  auto r = worker({"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  const auto f = testing::read_gguf(out + "/model.gguf");
  auto store = TensorStore::open(checkpoint_ + "/model.safetensors");
  ASSERT_TRUE(store.ok()) << store.status().to_string();
  const auto hf = [&](const std::string& name) {
    const TensorInfo* t = store->find(name);
    EXPECT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dtype, DType::kF32);
    const float* p = reinterpret_cast<const float*>(store->data(*t));
    return std::vector<float>(p, p + t->numel());
  };
  const auto f16_at = [&](const std::string& name, size_t i) {
    uint16_t h;
    std::memcpy(&h, f.data(f.tensor(name)) + 2 * i, 2);
    return h;
  };
  // stories260K: 8 query heads and 4 kv heads of 8, hidden 64.
  for (const auto& [proj, heads] : {std::pair{"q", 8}, std::pair{"k", 4}}) {
    const std::vector<float> w =
        hf(std::string("model.layers.3.self_attn.") + proj + "_proj.weight");
    const int head_dim = 8, cols = 64;
    for (int h = 0; h < heads; ++h)
      for (int r = 0; r < head_dim; ++r) {
        // GGUF row r of head h: pair r / 2 of the rotation, its half r % 2.
        const int src = h * head_dim + (r % 2) * (head_dim / 2) + r / 2;
        for (int c = 0; c < cols; ++c)
          ASSERT_EQ(
              f16_at(std::string("blk.3.attn_") + proj + ".weight", (h * head_dim + r) * cols + c),
              f32_to_f16(w[src * cols + c]))
              << proj << " head " << h << " row " << r << " col " << c;
      }
  }
  const std::vector<float> v = hf("model.layers.3.self_attn.v_proj.weight");
  for (size_t i = 0; i < v.size(); ++i)
    ASSERT_EQ(f16_at("blk.3.attn_v.weight", i), f32_to_f16(v[i]));
  const std::vector<float> norm = hf("model.layers.3.input_layernorm.weight");
  const auto& nt = f.tensor("blk.3.attn_norm.weight");
  ASSERT_EQ(nt.type, 0u);
  for (size_t i = 0; i < norm.size(); ++i) {
    float x;
    std::memcpy(&x, f.data(nt) + 4 * i, 4);
    ASSERT_EQ(x, norm[i]);
  }
}

TEST_F(GgufExportTest, RefusesAFolderHoldingAUsersFiles) {
  const std::string out = tmp_->path() + "/mine";
  fs::create_directories(out);
  std::ofstream(out + "/notes.txt") << "keep me";
  auto r = worker({"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("files Spillway did not write (notes.txt)"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out + "/model.gguf"));
  EXPECT_EQ(*read_file(out + "/notes.txt"), "keep me");
}

// Killed with model.gguf half written (fail point export.write, after the GGUF and before the
// Modelfile): the earlier export stays whole, and the next export removes the dead writer's folder.
TEST_F(GgufExportTest, KilledMidExportLeavesTheEarlierOne) {
  const std::string out = tmp_->path() + "/killed";
  ASSERT_EQ(
      worker({"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf"}).exit_code,
      0);
  const std::string before = *read_file(out + "/model.gguf");
  auto env = env_;
  env.push_back("SPILLWAY_FAIL_POINTS=export.write=kill");
  auto r = testing::run_worker_process(
      {"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf", "--type", "q8_0"},
      env, tmp_->path());
  EXPECT_EQ(r.exit_code, 128 + SIGKILL) << r.err;
  EXPECT_TRUE(*read_file(out + "/model.gguf") == before) << "the earlier export is untouched";
  EXPECT_EQ(testing::read_gguf(out + "/model.gguf").kv.at("general.file_type").u(), 1u);
  r = worker(
      {"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf", "--type", "q8_0"});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(testing::read_gguf(out + "/model.gguf").kv.at("general.file_type").u(), 7u);
  for (const auto& e : fs::directory_iterator(tmp_->path()))
    EXPECT_EQ(e.path().filename().string().find("killed.tmp-"), std::string::npos)
        << e.path() << " left behind";
}

TEST_F(GgufExportTest, BadFormatOrTypeIsExitTwo) {
  const std::string out = tmp_->path() + "/never";
  auto r = worker(
      {"export", "--checkpoint", checkpoint_, "--out", out, "--format", "gguf", "--type", "q4_k"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--type: unknown GGUF type 'q4_k'; choose f16, bf16 or q8_0"),
            std::string::npos)
      << r.err;
  r = worker({"export", "--checkpoint", checkpoint_, "--out", out, "--format", "onnx"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--format must be hf"), std::string::npos) << r.err;
  r = worker({"export", "--checkpoint", checkpoint_, "--out", out, "--type", "f16"});
  EXPECT_EQ(r.exit_code, 2);
  EXPECT_NE(r.err.find("--type applies to --format gguf only"), std::string::npos) << r.err;
  EXPECT_FALSE(fs::exists(out));
}

}  // namespace
}  // namespace spillway

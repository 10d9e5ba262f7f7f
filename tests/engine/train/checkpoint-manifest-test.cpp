// The checkpoint manifest (train/checkpoint-manifest.h) and the value checks of load_checkpoint
// (check_trainer_state), without a worker: what each refuses and what it names.
#include "train/checkpoint-manifest.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include "core/crc32c.h"
#include "test-data.h"
#include "train/checkpoint.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;

class ManifestTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = tmp_.path() + "/step-000007";
    fs::create_directories(dir_ + "/optimizer");
  }
  // Writes `bytes` to `rel` in the checkpoint through the digesting writer.
  void put(const std::string& rel, const std::string& bytes) {
    ASSERT_TRUE(write_file_atomic(dir_ + "/" + rel, bytes, &m_.files).ok());
  }
  std::string status_of_verify() { return verify_checkpoint_files(dir_).status().to_string(); }

  testing::TempDir tmp_;
  std::string dir_;
  CheckpointManifest m_{7, "run-a", {}};
};

TEST_F(ManifestTest, DigestsAreTakenAsTheBytesGoOutAndVerify) {
  put("trainer_state.json", "{\"step\": 7}");
  put("optimizer/block-0.safetensors", std::string(1000, 'x'));
  EXPECT_EQ(m_.files[0].bytes, 11u);
  EXPECT_EQ(m_.files[0].crc32c, crc32c("{\"step\": 7}", 11));
  ASSERT_TRUE(write_checkpoint_manifest(dir_, m_).ok());
  auto got = verify_checkpoint_files(dir_);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  EXPECT_EQ(got->step, 7);
  EXPECT_EQ(got->run_id, "run-a");
  ASSERT_EQ(got->files.size(), 2u);  // sorted, relative, '/' separated
  EXPECT_EQ(got->files[0].path, "optimizer/block-0.safetensors");
  EXPECT_EQ(got->files[1].path, "trainer_state.json");
  const auto digest = digest_file(dir_ + "/optimizer/block-0.safetensors");
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(digest->crc32c, crc32c(std::string(1000, 'x').data(), 1000));
}

TEST_F(ManifestTest, EachMismatchIsRefusedNamingTheFile) {
  put("trainer_state.json", "{\"step\": 7}");
  put("model.safetensors", "weights!");
  ASSERT_TRUE(write_checkpoint_manifest(dir_, m_).ok());
  {  // same size, other bytes
    std::ofstream(dir_ + "/model.safetensors") << "weights?";
    EXPECT_NE(status_of_verify().find("model.safetensors does not match its manifest (CRC-32C"),
              std::string::npos)
        << status_of_verify();
    std::ofstream(dir_ + "/model.safetensors") << "weights!";
  }
  {  // cut short
    std::ofstream(dir_ + "/model.safetensors") << "weight";
    EXPECT_NE(status_of_verify().find("(6 bytes, recorded 8)"), std::string::npos)
        << status_of_verify();
    std::ofstream(dir_ + "/model.safetensors") << "weights!";
  }
  {  // missing
    fs::rename(dir_ + "/model.safetensors", dir_ + "/aside");
    EXPECT_NE(status_of_verify().find("model.safetensors is listed in its manifest but cannot be"),
              std::string::npos)
        << status_of_verify();
    fs::rename(dir_ + "/aside", dir_ + "/model.safetensors");
  }
  {  // an unlisted reader's file; a user's notes are let be
    std::ofstream(dir_ + "/notes.txt") << "mine";
    EXPECT_TRUE(verify_checkpoint_files(dir_).ok());
    std::ofstream(dir_ + "/optimizer/block-3.safetensors") << "x";
    EXPECT_NE(
        status_of_verify().find("optimizer/block-3.safetensors is not part of this checkpoint"),
        std::string::npos)
        << status_of_verify();
  }
}

TEST_F(ManifestTest, AManifestNamingAFileOutsideTheFolderIsRefused) {
  put("trainer_state.json", "{}");
  ASSERT_TRUE(write_checkpoint_manifest(dir_, m_).ok());
  std::string text;
  {
    std::ifstream f(dir_ + "/manifest.json");
    text.assign(std::istreambuf_iterator<char>(f), {});
  }
  const size_t at = text.find("\"trainer_state.json\"");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 20, "\"../../etc/passwd\"");
  std::ofstream(dir_ + "/manifest.json", std::ios::trunc) << text;
  EXPECT_NE(status_of_verify().find("is not inside the checkpoint's folder"), std::string::npos)
      << status_of_verify();
  EXPECT_TRUE(verify_if_checkpoint(tmp_.path()).ok());  // not a checkpoint: nothing to check
}

TEST(CheckTrainerState, ValuesThatDoNotFitAreRefused) {
  TrainerState t;
  t.step = 4;
  t.run_id = "r";
  t.data = {0, 0, 8};
  t.data_cursor = {{"seed", "1"},
                   {"shuffle", true},
                   {"dataset_size", 20},
                   {"epoch", 1},
                   {"index", 12}};  // 32 sequences = 4 steps of 8
  const CheckpointManifest m{4, "r", {}};
  EXPECT_TRUE(check_trainer_state("/x/step-000004", t, 4, &m).ok());
  EXPECT_TRUE(check_trainer_state("/x/my-copy", t, 4, &m).ok());  // a folder of the user's name
  const auto why = [&](const std::string& dir, int64_t opt, const CheckpointManifest* mm) {
    return check_trainer_state(dir, t, opt, mm).to_string();
  };
  EXPECT_NE(why("/x/step-000005", 4, &m).find("says step 4 in the folder of step 5"),
            std::string::npos);
  EXPECT_NE(why("/x/step-000004", 3, &m).find("the optimizer's step is 3 at step 4"),
            std::string::npos);
  const CheckpointManifest other_run{4, "s", {}}, other_step{5, "r", {}};
  EXPECT_NE(why("/x/step-000004", 4, &other_run).find("its manifest of run 's'"),
            std::string::npos);
  EXPECT_NE(why("/x/step-000004", 4, &other_step).find("its manifest step 5"), std::string::npos);
  t.data_cursor["index"] = 13;
  EXPECT_NE(why("/x/step-000004", 4, &m).find("is not where step 4 leaves it"), std::string::npos);
  t.data_cursor["index"] = 12;
  t.data_cursor["epoch"] = int64_t{1} << 62;  // epoch × size wraps 64 bits
  EXPECT_NE(why("/x/step-000004", 4, &m).find("is beyond any run's"), std::string::npos);
  // A resume with another batch starts a new segment: 2 sequences per step from step 4 on.
  t.data_cursor["epoch"] = 1;
  t.data = t.data.continued(4, 32, 2);
  EXPECT_EQ(t.data.since_step, 4);
  EXPECT_EQ(t.data.sequences_before, 32);
  t.step = 6;
  t.data_cursor["index"] = 16;  // 32 + 2 × 2
  const CheckpointManifest m6{6, "r", {}};
  EXPECT_TRUE(check_trainer_state("/x/step-000006", t, 6, &m6).ok());
}

// The keep-N rotation removes only checkpoints that hold nothing but Spillway's files: one with a
// user's file beside them is kept whole, and the rotation says so.
TEST(PruneCheckpoints, ACheckpointHoldingAUsersFileIsKept) {
  testing::TempDir tmp;
  ModelConfig c;
  c.architecture = "LlamaForCausalLM";
  c.model_type = "llama";
  c.vocab_size = 16;
  c.hidden_size = 8;
  c.intermediate_size = 12;
  c.num_layers = 1;
  c.num_heads = 2;
  c.num_kv_heads = 1;
  c.head_dim = 4;
  c.max_position_embeddings = 16;
  auto state = std::move(ModelState::create(ParameterLayout::build(c), true)).value();
  const std::string ckpts = tmp.path() + "/checkpoints";
  for (int step = 1; step <= 3; ++step) {
    TrainerState t;
    t.step = step;
    state->step = step;
    ASSERT_TRUE(save_checkpoint(ckpts, *state, t).ok());
  }
  std::ofstream(ckpts + "/step-000001/notes.txt") << "my notes";
  const std::vector<std::string> notes = prune_checkpoints(ckpts, 1);
  ASSERT_EQ(notes.size(), 1u);
  EXPECT_NE(notes[0].find("step-000001 past the keep-1 rotation: it holds notes.txt"),
            std::string::npos)
      << notes[0];
  EXPECT_TRUE(fs::exists(ckpts + "/step-000001/notes.txt"));
  EXPECT_TRUE(fs::exists(ckpts + "/step-000001/model.safetensors"));
  EXPECT_FALSE(fs::exists(ckpts + "/step-000002"));
  EXPECT_TRUE(fs::exists(ckpts + "/step-000003/manifest.json"));
}

}  // namespace
}  // namespace spillway

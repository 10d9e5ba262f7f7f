// A checkpoint is whole or refused (issue 28): the real worker resumes, exports and generates from
// checkpoints edited as a damaged disk, an editor or a copy between folders would leave them, and
// each one is refused with exit 1 and a message naming the file and what does not match, never
// trained on. Each edit is tried twice: as is (the manifest's CRC-32C catches it), and with the
// manifest rewritten to match (the value checks behind it catch it).
//
// The run: stories260K on tiny Shakespeare, 4 steps, a checkpoint every step; resumes are from
// step-000002. The untouched resume reproduces steps 3 and 4 bit for bit.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "checkpoint-reseal.h"
#include "core/file-util.h"
#include "run-files.h"
#include "test-data.h"
#include "train/checkpoint-manifest.h"
#include "worker-process.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::of_type;
using testing::read_events;

class CheckpointIntegrity : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = {"XDG_DATA_HOME=" + tmp_.path() + "/xdg", "OPENBLAS_NUM_THREADS=1",
            "OPENBLAS_THREAD_TIMEOUT=4"};
  }

  json job(const std::string& run_dir) const {
    return json{{"name", "integrity"},
                {"model", {{"path", testing::data_path("models/stories260K")}}},
                {"data",
                 {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")},
                  {"seq_len", 64},
                  {"seed", 5}}},
                {"train",
                 {{"steps", 4},
                  {"micro_batch_size", 4},
                  {"lr", 1e-3},
                  {"checkpoint_every", 1},
                  {"keep_checkpoints", 10},
                  {"eval_every", 0}}},
                {"placement", {{"backend", "cpu"}}},
                {"output", {{"run_dir", run_dir}}}};
  }
  std::string write_job(const std::string& run_dir) {
    const std::string path = run_dir + ".json";
    std::ofstream(path) << job(run_dir).dump(2);
    return path;
  }
  testing::ProcessResult worker(const std::vector<std::string>& args) {
    return testing::run_worker_process(args, env_, tmp_.path());
  }
  // The losses of steps 3 and 4 that `run_dir`'s events recorded last (a resume appends).
  static std::vector<double> last_two_losses(const std::string& run_dir) {
    std::vector<double> out;
    for (const json& e : of_type(read_events(run_dir), "step")) out.push_back(e.value("loss", 0.0));
    if (out.size() < 2) return out;
    return {out[out.size() - 2], out[out.size() - 1]};
  }

  // The 4-step run, trained once; each case resumes a copy of its folder.
  void train_original() {
    original_ = tmp_.path() + "/original";
    auto r = worker({"train", write_job(original_)});
    ASSERT_EQ(r.exit_code, 0) << r.err;
    straight_ = last_two_losses(original_);
    ASSERT_EQ(straight_.size(), 2u);
  }
  // A copy of the original run folder (a new run for runs.db: no row names the copy's folder).
  std::string copy_run(const std::string& name) {
    const std::string dir = tmp_.path() + "/" + name;
    fs::copy(original_, dir, fs::copy_options::recursive);
    return dir;
  }
  static std::string ckpt(const std::string& run_dir, int step) {
    char buf[32];
    std::snprintf(buf, sizeof(buf), "/checkpoints/step-%06d", step);
    return run_dir + buf;
  }

  testing::TempDir tmp_;
  std::vector<std::string> env_;
  std::string original_;
  std::vector<double> straight_;
};

json read_json(const std::string& path) {
  return json::parse(*read_file(path));
}
void write_json(const std::string& path, const json& j) {
  std::ofstream(path, std::ios::trunc) << j.dump(2);
}
// Replaces the text `from` with `to` once in `path` (a JSON number a json round trip would change).
void edit_text(const std::string& path, const std::string& from, const std::string& to) {
  std::string text = *read_file(path);
  const size_t at = text.find(from);
  ASSERT_NE(at, std::string::npos) << from << " not in " << path;
  text.replace(at, from.size(), to);
  std::ofstream(path, std::ios::trunc) << text;
}

struct Edit {
  const char* name;
  std::function<void(const std::string& ckpt_dir, const std::string& run_dir)> apply;
  const char* sealed_message;  // what the value checks say once the manifest matches; "" for none
};

// Each edit of step-000002 from the table, and more of the same kind.
std::vector<Edit> edits() {
  const auto state_edit = [](std::function<void(json&)> f) {
    return [f](const std::string& c, const std::string&) {
      json j = read_json(c + "/trainer_state.json");
      f(j);
      write_json(c + "/trainer_state.json", j);
    };
  };
  return {
      {"step := 2^64",
       [](const std::string& c, const std::string&) {
         edit_text(c + "/trainer_state.json", "\"step\": 2,", "\"step\": 18446744073709551616,");
       },
       "'step' is"},
      {"step := -1", state_edit([](json& j) { j["step"] = -1; }), "'step' is -1"},
      {"step := 3", state_edit([](json& j) { j["step"] = 3; }), "step 3 in the folder of step 2"},
      {"step := 0", state_edit([](json& j) { j["step"] = 0; }), "step 0 in the folder of step 2"},
      {"step := 1", state_edit([](json& j) { j["step"] = 1; }), "step 1 in the folder of step 2"},
      {"optimizer_step := 2^53",
       state_edit([](json& j) { j["optimizer_step"] = int64_t{1} << 53; }),
       "the optimizer's step is 9007199254740992 at step 2"},
      {"optimizer_step := 100", state_edit([](json& j) { j["optimizer_step"] = 100; }),
       "the optimizer's step is 100 at step 2"},
      {"optimizer_step := 0", state_edit([](json& j) { j["optimizer_step"] = 0; }),
       "the optimizer's step is 0 at step 2"},
      {"optimizer_step := 1", state_edit([](json& j) { j["optimizer_step"] = 1; }),
       "the optimizer's step is 1 at step 2"},
      {"optimizer_step := 3", state_edit([](json& j) { j["optimizer_step"] = 3; }),
       "the optimizer's step is 3 at step 2"},
      {"data_cursor.epoch := 1000", state_edit([](json& j) { j["data_cursor"]["epoch"] = 1000; }),
       "is not where step 2 leaves it"},
      {"data_cursor.epoch := 2^40",
       state_edit([](json& j) { j["data_cursor"]["epoch"] = int64_t{1} << 40; }),
       "is not where step 2 leaves it"},
      {"data_cursor.index := +1", state_edit([](json& j) {
         j["data_cursor"]["index"] = j["data_cursor"]["index"].get<int>() + 1;
       }),
       "is not where step 2 leaves it"},
      {"trainer_state.json copied from step-000003",
       [](const std::string& c, const std::string&) {
         fs::copy_file(c + "/../step-000003/trainer_state.json", c + "/trainer_state.json",
                       fs::copy_options::overwrite_existing);
       },
       "step 3 in the folder of step 2"},
      {"model.safetensors copied from step-000003",
       [](const std::string& c, const std::string&) {
         fs::copy_file(c + "/../step-000003/model.safetensors", c + "/model.safetensors",
                       fs::copy_options::overwrite_existing);
       },
       ""},  // the same shapes: only the manifest can tell
      {"one bit flipped in optimizer.safetensors",
       [](const std::string& c, const std::string&) {
         std::fstream f(c + "/optimizer.safetensors",
                        std::ios::in | std::ios::out | std::ios::binary);
         f.seekg(-100, std::ios::end);
         char b = 0;
         f.read(&b, 1);
         b ^= 0x10;
         f.seekp(-100, std::ios::end);
         f.write(&b, 1);
       },
       ""},
      {"optimizer.safetensors cut short",
       [](const std::string& c, const std::string&) {
         fs::resize_file(c + "/optimizer.safetensors",
                         fs::file_size(c + "/optimizer.safetensors") - 4);
       },
       ""},
  };
}

// The table: each edit of step-000002 is refused on resume with exit 1, naming what does
// not match; nothing is trained (no step event is added). With the manifest rewritten to match,
// the value checks refuse it too (where the values tell).
TEST_F(CheckpointIntegrity, EveryEditedCheckpointIsRefusedOnResume) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  int n = 0;
  for (const Edit& e : edits()) {
    for (bool sealed : {false, true}) {
      if (sealed && std::string(e.sealed_message).empty()) continue;
      SCOPED_TRACE(std::string(e.name) + (sealed ? " (manifest rewritten)" : ""));
      const std::string run = copy_run("case" + std::to_string(n++));
      const std::string c = ckpt(run, 2);
      e.apply(c, run);
      if (sealed) testing::reseal_checkpoint(c);
      const size_t steps_before = of_type(read_events(run), "step").size();
      const auto r = worker({"train", write_job(run), "--resume", c});
      EXPECT_EQ(r.exit_code, 1) << r.err;
      EXPECT_NE(r.err.find("the checkpoint " + c + " is damaged"), std::string::npos) << r.err;
      EXPECT_NE(r.err.find("resume from an earlier checkpoint"), std::string::npos) << r.err;
      if (!sealed)
        EXPECT_NE(r.err.find("does not match its manifest"), std::string::npos) << r.err;
      else
        EXPECT_NE(r.err.find(e.sealed_message), std::string::npos) << r.err;
      EXPECT_EQ(of_type(read_events(run), "step").size(), steps_before) << "it trained";
    }
  }
}

// The control: the untouched checkpoint resumes and trains steps 3 and 4 with the same bits.
TEST_F(CheckpointIntegrity, UntouchedCheckpointResumesBitExact) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string run = copy_run("untouched");
  const auto r = worker({"train", write_job(run), "--resume", ckpt(run, 2)});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(last_two_losses(run), straight_);
  EXPECT_EQ(*read_file(ckpt(run, 4) + "/model.safetensors"),
            *read_file(ckpt(original_, 4) + "/model.safetensors"));
  // The manifest lists every file with its size and CRC-32C, and they verify.
  const auto m = verify_checkpoint_files(ckpt(run, 4));
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  EXPECT_EQ(m->step, 4);
  std::vector<std::string> paths;
  for (const FileDigest& f : m->files) paths.push_back(f.path);
  EXPECT_EQ(paths, (std::vector<std::string>{"config.json", "model.safetensors",
                                             "optimizer.safetensors", "trainer_state.json"}));
}

// Export, generate and eval check a checkpoint before they read it: the same refusal.
TEST_F(CheckpointIntegrity, ExportGenerateAndEvalRefuseADamagedCheckpoint) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string run = copy_run("readers");
  const std::string c = ckpt(run, 3);
  edit_text(c + "/config.json", "\"hidden_size\"", "\"hidden_size\" ");  // a changed byte count
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"export", "--checkpoint", c, "--out", tmp_.path() + "/out"},
        std::vector<std::string>{"generate", "--model", c, "--prompt", "Once", "--tokenizer",
                                 testing::data_path("models/stories260K")},
        std::vector<std::string>{"eval", "--model", c, "--data",
                                 testing::data_path("datasets/tinyshakespeare/input.txt")}}) {
    SCOPED_TRACE(args[0]);
    const auto r = worker(args);
    EXPECT_EQ(r.exit_code, 1) << r.err;
    EXPECT_NE(r.err.find("config.json does not match its manifest"), std::string::npos) << r.err;
    EXPECT_NE(r.err.find("is damaged"), std::string::npos) << r.err;
  }
  EXPECT_FALSE(fs::exists(tmp_.path() + "/out"));
}

// A file added to a checkpoint that its manifest does not list is refused: a reader could take it
// in place of a listed one (an index beside model.safetensors).
TEST_F(CheckpointIntegrity, AnUnlistedFileIsRefused) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string run = copy_run("unlisted");
  const std::string c = ckpt(run, 2);
  fs::copy_file(ckpt(run, 3) + "/model.safetensors", c + "/model-00001-of-00001.safetensors");
  const auto r = worker({"train", write_job(run), "--resume", c});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("model-00001-of-00001.safetensors is not part of this checkpoint"),
            std::string::npos)
      << r.err;
}

// A checkpoint without its manifest (the last file written) is unfinished: refused.
TEST_F(CheckpointIntegrity, AMissingManifestIsRefused) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string run = copy_run("nomanifest");
  fs::remove(ckpt(run, 2) + "/" + kCheckpointManifestFile);
  const auto r = worker({"train", write_job(run), "--resume", ckpt(run, 2)});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("manifest.json is missing"), std::string::npos) << r.err;
}

// A checkpoint folder of another run put into a run's folder (a copy between folders) is refused
// when that run resumes: the manifest names the run that wrote it.
TEST_F(CheckpointIntegrity, ACheckpointOfAnotherRunIsRefused) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string other = tmp_.path() + "/other";
  ASSERT_EQ(worker({"train", write_job(other)}).exit_code, 0);
  fs::remove_all(ckpt(original_, 2));
  fs::copy(ckpt(other, 2), ckpt(original_, 2), fs::copy_options::recursive);
  const auto r = worker({"train", write_job(original_), "--resume", ckpt(original_, 2)});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("was written by run"), std::string::npos) << r.err;
  EXPECT_NE(r.err.find("copied from another run"), std::string::npos) << r.err;
}

// A checkpoint of format 1 (written before the manifest) resumes with its values checked and a
// warning that its files could not be; the steps after it are the same bits.
TEST_F(CheckpointIntegrity, AFormat1CheckpointResumesWithItsValuesChecked) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string run = copy_run("format1");
  const std::string c = ckpt(run, 2);
  fs::remove(c + "/" + kCheckpointManifestFile);
  json j = read_json(c + "/trainer_state.json");
  j["format_version"] = 1;
  j.erase("run_id");
  j.erase("data_segment");
  write_json(c + "/trainer_state.json", j);
  auto r = worker({"train", write_job(run), "--resume", c});
  ASSERT_EQ(r.exit_code, 0) << r.err;
  EXPECT_EQ(last_two_losses(run), straight_);
  bool warned = false;
  for (const json& e : of_type(read_events(run), "log"))
    warned |= e.value("message", "").find("format 1, no manifest") != std::string::npos;
  EXPECT_TRUE(warned);

  // Its values are still checked: the step of another folder is refused.
  const std::string run2 = copy_run("format1-edited");
  const std::string c2 = ckpt(run2, 2);
  fs::remove(c2 + "/" + kCheckpointManifestFile);
  j["step"] = 3;
  write_json(c2 + "/trainer_state.json", j);
  r = worker({"train", write_job(run2), "--resume", c2});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_NE(r.err.find("step 3 in the folder of step 2"), std::string::npos) << r.err;
}

// The export of a checkpoint whose step is 2^64 printed "step":-9223372036854775808: now refused.
TEST_F(CheckpointIntegrity, NoStepWrapsInExport) {
  SPILLWAY_REQUIRE_DATA();
  ASSERT_NO_FATAL_FAILURE(train_original());
  const std::string run = copy_run("wrap");
  const std::string c = ckpt(run, 2);
  edit_text(c + "/trainer_state.json", "\"step\": 2,", "\"step\": 18446744073709551616,");
  testing::reseal_checkpoint(c);
  const auto r = worker({"export", "--checkpoint", c, "--out", tmp_.path() + "/out", "--json"});
  EXPECT_EQ(r.exit_code, 1) << r.err;
  EXPECT_EQ(r.out.find("-9223372036854775808"), std::string::npos) << r.out;
  EXPECT_NE((r.out + r.err).find("not an integer in [0, 9007199254740992]"), std::string::npos)
      << r.out << r.err;
}

}  // namespace
}  // namespace spillway

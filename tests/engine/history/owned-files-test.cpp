// Owned files: Spillway removes from a run folder, and from plan --measure's throwaway folder, only
// the files it wrote; a user's files beside them, or inside its own folders, stay with the folders
// that hold them.
#include "history/owned-files.h"

#include <gtest/gtest.h>

#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/file-util.h"
#include "test-data.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;

void put(const std::string& path, const std::string& text = "x") {
  fs::create_directories(fs::path(path).parent_path());
  ASSERT_TRUE(write_file_atomic(path, text).ok()) << path;
}

// A run folder as the worker leaves it: its files, two checkpoints (one with the SSD state's
// blocks), a half-written one of a dead writer, one set aside by a resume, and an export with
// its manifest.
void make_run(const std::string& run) {
  for (const char* f : {"job.json", "events.jsonl", "worker.out", "worker.err"}) put(run + "/" + f);
  for (const char* step : {"step-000050", "step-000100", "step-000150.tmp-4242",
                           "replaced-20261127T101010Z/step-000200"}) {
    const std::string c = run + "/checkpoints/" + step;
    for (const char* f :
         {"model.safetensors", "trainer_state.json", "config.json", "manifest.json"})
      put(c + "/" + f);
  }
  put(run + "/checkpoints/step-000050/optimizer.safetensors");
  put(run + "/checkpoints/step-000100/optimizer/block-0.safetensors");
  put(run + "/checkpoints/step-000150.tmp-4242/optimizer.safetensors.tmp.4242");
  for (const char* f : {"model.safetensors", "config.json", "tokenizer.json"})
    put(run + "/export/" + f);
  put(run + "/export/" + std::string(kExportManifest),
      nlohmann::json{{"written_by", "spillway"},
                     {"files", {"model.safetensors", "config.json", "tokenizer.json"}}}
          .dump());
}

TEST(OwnedFiles, DeletingARunRemovesOnlyItsOwnFiles) {
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run";
  make_run(run);
  // The user's: beside the run's files, in its checkpoints folder, in a checkpoint, in the export
  // (a file the manifest does not list, and a folder), and an empty folder of theirs.
  put(run + "/notes.txt", "mine");
  put(run + "/checkpoints/best.txt", "step 100");
  put(run + "/checkpoints/step-000100/eval.md", "good");
  put(run + "/export/README.md", "model card");
  put(run + "/export/extra/x.bin", "y");
  fs::create_directories(run + "/plots");

  const OwnedFiles scan = scan_run_folder(run);
  EXPECT_EQ(scan.foreign, (std::vector<std::string>{
                              run + "/checkpoints/best.txt",
                              run + "/checkpoints/step-000100/eval.md", run + "/export/README.md",
                              run + "/export/extra", run + "/notes.txt", run + "/plots"}));
  EXPECT_EQ(scan.owned.size(), 4u + 4 * 4 + 3 + 4);  // run files, checkpoints, extras, export

  const Removal r = remove_run_files(run);
  EXPECT_EQ(r.kept, scan.foreign);
  EXPECT_TRUE(r.failed.empty());
  // Every file of the user's is there with its content; only the folders that hold them stay.
  EXPECT_EQ(*read_file(run + "/notes.txt"), "mine");
  EXPECT_EQ(*read_file(run + "/checkpoints/best.txt"), "step 100");
  EXPECT_EQ(*read_file(run + "/checkpoints/step-000100/eval.md"), "good");
  EXPECT_EQ(*read_file(run + "/export/README.md"), "model card");
  EXPECT_EQ(*read_file(run + "/export/extra/x.bin"), "y");
  EXPECT_TRUE(fs::is_directory(run + "/plots"));
  EXPECT_EQ(files_under(run),
            (std::vector<std::string>{"checkpoints/best.txt", "checkpoints/step-000100/eval.md",
                                      "export/README.md", "export/extra/x.bin", "notes.txt"}));
  EXPECT_FALSE(fs::exists(run + "/checkpoints/step-000050"));
  EXPECT_FALSE(fs::exists(run + "/checkpoints/replaced-20261127T101010Z"));
}

TEST(OwnedFiles, ARunFolderOfOnlySpillwaysFilesGoesWhole) {
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run";
  make_run(run);
  const Removal r = remove_run_files(run);
  EXPECT_TRUE(r.kept.empty());
  EXPECT_TRUE(r.failed.empty());
  EXPECT_FALSE(fs::exists(run));
  EXPECT_TRUE(fs::exists(tmp.path()));
}

// An export written before exports had a manifest: the names an export writes are its own.
TEST(OwnedFiles, AnExportWithoutAManifestOwnsOnlyExportFileNames) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/export";
  for (const char* f : {"model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors",
                        "model.safetensors.index.json", "config.json", "tokenizer.model"})
    put(dir + "/" + f);
  put(dir + "/notes.txt");
  EXPECT_EQ(export_owned_files(dir),
            (std::vector<std::string>{"config.json", "model-00001-of-00002.safetensors",
                                      "model-00002-of-00002.safetensors",
                                      "model.safetensors.index.json", "tokenizer.model"}));
  // Without a model file it is no export at all: a folder of the user's with a config.json.
  fs::remove(dir + "/model-00001-of-00002.safetensors");
  fs::remove(dir + "/model-00002-of-00002.safetensors");
  fs::remove(dir + "/model.safetensors.index.json");
  EXPECT_TRUE(export_owned_files(dir).empty());
}

// A symbolic link in the run folder is the user's, and what it points to is never entered.
TEST(OwnedFiles, LinksAreNotFollowed) {
  testing::TempDir tmp;
  const std::string run = tmp.path() + "/run", elsewhere = tmp.path() + "/data";
  make_run(run);
  put(elsewhere + "/model.safetensors", "precious");
  fs::create_directory_symlink(elsewhere, run + "/checkpoints/step-000300");
  const Removal r = remove_run_files(run);
  EXPECT_EQ(r.kept, std::vector<std::string>{run + "/checkpoints/step-000300"});
  EXPECT_EQ(*read_file(elsewhere + "/model.safetensors"), "precious");
}

TEST(OwnedFiles, AThrowawayRunLeavesWhatElseIsInItsFolder) {
  testing::TempDir tmp;
  const std::string dir = tmp.path() + "/" + kThrowawayRunPrefix + "abc123";
  make_run(dir + "/run");
  for (const char* f : {"runs.db", "runs.db-wal", "runs.db-shm"}) put(dir + "/" + f);
  put(dir + "/other.txt", "not the run's");
  const Removal r = remove_throwaway_run(dir);
  EXPECT_EQ(r.kept, std::vector<std::string>{dir + "/other.txt"});
  EXPECT_EQ(files_under(dir), std::vector<std::string>{"other.txt"});

  fs::remove(dir + "/other.txt");
  make_run(dir + "/run");
  put(dir + "/runs.db");
  EXPECT_TRUE(remove_throwaway_run(dir).kept.empty());
  EXPECT_FALSE(fs::exists(dir));
}

}  // namespace
}  // namespace spillway

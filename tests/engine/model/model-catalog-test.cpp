// The Hugging Face hub cache as New run and `spillway-worker models` list it.
#include "model/model-catalog.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>
#include <optional>

#include "test-data.h"

namespace spillway::testing {
namespace {
namespace fs = std::filesystem;

void write(const std::string& path, const std::string& text) {
  fs::create_directories(fs::path(path).parent_path());
  std::ofstream(path) << text;
}

TEST(ModelCatalog, ListsTheSnapshotMainNamesElseEverySnapshotWithAConfig) {
  TempDir hub;
  const std::string h = hub.path();
  // refs/main names the current snapshot; the older one is not listed.
  write(h + "/models--Qwen--Qwen3-0.6B/refs/main", "c0ffee\n");
  write(h + "/models--Qwen--Qwen3-0.6B/snapshots/c0ffee/config.json", "{}");
  write(h + "/models--Qwen--Qwen3-0.6B/snapshots/0ld/config.json", "{}");
  // No refs/main (a revision downloaded by hash): every snapshot with a config.json.
  write(h + "/models--org--two/snapshots/b/config.json", "{}");
  write(h + "/models--org--two/snapshots/a/config.json", "{}");
  write(h + "/models--org--two/snapshots/c/README.md", "no config");
  // A name of its own (no organisation), datasets and stray files are not models.
  write(h + "/models--gpt2/snapshots/1/config.json", "{}");
  write(h + "/datasets--org--data/snapshots/1/config.json", "{}");
  write(h + "/models--not-a-folder", "");
  // refs/main naming a snapshot that is gone falls back to the snapshots there are.
  write(h + "/models--org--moved/refs/main", "gone");
  write(h + "/models--org--moved/snapshots/x/config.json", "{}");

  const std::vector<CachedModel> found = find_cached_models(h);
  ASSERT_EQ(found.size(), 5u);
  EXPECT_EQ(found[0].repo, "Qwen/Qwen3-0.6B");
  EXPECT_EQ(found[0].revision, "c0ffee");
  EXPECT_EQ(found[0].path, h + "/models--Qwen--Qwen3-0.6B/snapshots/c0ffee");
  EXPECT_EQ(found[1].repo, "gpt2");
  EXPECT_EQ(found[2].repo, "org/moved");
  EXPECT_EQ(found[2].revision, "x");
  EXPECT_EQ(found[3].repo, "org/two");
  EXPECT_EQ(found[3].revision, "a");
  EXPECT_EQ(found[4].revision, "b");
  EXPECT_TRUE(find_cached_models(h + "/missing").empty());
  EXPECT_TRUE(find_cached_models("").empty());
}

// Sets the variables for one test and restores them after, so the test holds whatever the machine
// has set.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = getenv(name)) old_ = old;
    value ? setenv(name, value, 1) : unsetenv(name);
  }
  ~ScopedEnv() { old_ ? setenv(name_, old_->c_str(), 1) : unsetenv(name_); }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

TEST(ModelCatalog, HubFolderFollowsHuggingFaceHubsVariablesInOrder) {
  ScopedEnv hub("HF_HUB_CACHE", nullptr), legacy("HUGGINGFACE_HUB_CACHE", nullptr),
      home_hf("HF_HOME", nullptr), xdg("XDG_CACHE_HOME", nullptr), home("HOME", "/home/u");
  EXPECT_EQ(hugging_face_hub_dir(), "/home/u/.cache/huggingface/hub");
  {
    ScopedEnv x("XDG_CACHE_HOME", "/xdg");
    EXPECT_EQ(hugging_face_hub_dir(), "/xdg/huggingface/hub");
    ScopedEnv h("HF_HOME", "/hf");
    EXPECT_EQ(hugging_face_hub_dir(), "/hf/hub");
    ScopedEnv l("HUGGINGFACE_HUB_CACHE", "/legacy");
    EXPECT_EQ(hugging_face_hub_dir(), "/legacy");
    ScopedEnv c("HF_HUB_CACHE", "/cache");
    EXPECT_EQ(hugging_face_hub_dir(), "/cache");
  }
  ScopedEnv no_home("HOME", nullptr);
  EXPECT_EQ(hugging_face_hub_dir(), "");
}

}  // namespace
}  // namespace spillway::testing

// The New run page's dataset preview shows what training trains: the same chat template and the
// same trained-token mask as the worker's training, for Alpaca, ShareGPT and OpenAI-messages data
// on the Qwen and Llama tokenizers. Training's side is the worker's: the job file the page writes,
// read by worker::load_job, and the options the trainer reads data with (dataset_options).
#include <gtest/gtest.h>

#include <QDir>
#include <QFile>
#include <QJsonDocument>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "DatasetPreview.h"
#include "JobSettings.h"
#include "core/file-util.h"
#include "data/dataset.h"
#include "data/model-tokenizer.h"
#include "test-data.h"
#include "train/train-job.h"
#include "worker/job-file.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using spillway::testing::data_path;
using spillway::testing::TempDir;

struct TokenizerCase {
  const char* tokenizer;  // ../shared/data/tokenizers/<name>
  const char* config;     // a model of the family: ../shared/data/models/<name>/config.json
  int vocab_size;         // the tokenizer's, for the model's config.json
};

// A model folder for `t`: the family's config.json with the tokenizer's vocabulary, and the
// tokenizer's files, linked from ../shared/data (read in place).
std::string modelFolder(const TempDir& dir, const TokenizerCase& t) {
  const std::string folder = dir.path() + "/" + t.tokenizer;
  fs::create_directories(folder);
  json config =
      json::parse(*read_file(data_path(std::string("models/") + t.config + "/config.json")));
  config["vocab_size"] = t.vocab_size;
  std::ofstream(folder + "/config.json") << config.dump(2);
  for (const char* file :
       {"tokenizer.json", "tokenizer_config.json", "tokenizer.model", "special_tokens_map.json"}) {
    const std::string from = data_path(std::string("tokenizers/") + t.tokenizer + "/" + file);
    if (fs::exists(from)) fs::create_symlink(from, folder + "/" + file);
  }
  return folder;
}

// OpenAI `messages` JSONL made from the first ShareGPT conversations.
std::string messagesFile(const TempDir& dir) {
  const std::string path = dir.path() + "/messages.jsonl";
  const json sharegpt =
      json::parse(*read_file(data_path("datasets/sharegpt/fastchat_dummy_conversation.json")));
  std::ofstream out(path);
  for (size_t i = 0; i < 20 && i < sharegpt.size(); ++i) {
    json messages = json::array();
    for (const json& turn : sharegpt[i]["conversations"])
      messages.push_back(
          {{"role", turn["from"] == "human" ? "user" : "assistant"}, {"content", turn["value"]}});
    out << json{{"messages", messages}}.dump() << "\n";
  }
  return path;
}

TEST(PreviewMatchesTraining, ChatTemplateAndTrainedTokens) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  const TokenizerCase tokenizers[] = {{"qwen2.5", "qwen2-tiny", 151665},
                                      {"llama3", "llama-mha-tiny", 128256},
                                      {"llama2", "llama-mha-tiny", 32000}};
  const std::pair<const char*, std::string> datasets[] = {
      {"alpaca", data_path("datasets/alpaca/alpaca_en_demo.json")},
      {"sharegpt", data_path("datasets/sharegpt/fastchat_dummy_conversation.json")},
      {"openai", messagesFile(dir)}};
  for (const TokenizerCase& t : tokenizers) {
    if (!fs::exists(data_path(std::string("tokenizers/") + t.tokenizer + "/tokenizer.json")))
      GTEST_SKIP() << "no " << t.tokenizer << " tokenizer in " << spillway::testing::data_dir();
    const std::string model = modelFolder(dir, t);
    auto tokenizer =
        load_model_tokenizer(model);  // training's: the model folder's (model.tokenizer unset)
    ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().to_string();
    for (const auto& [format, data] : datasets) {
      // The job's own template, or the model's (auto): the preview must take both from the job.
      for (const char* chatTemplate : {"auto", "alpaca"}) {
        SCOPED_TRACE(std::string(t.tokenizer) + ", " + format + ", template " + chatTemplate);
        JobSettings s;
        s.modelPath = QString::fromStdString(model);
        s.trainPath = QString::fromStdString(data);
        s.chatTemplate = chatTemplate;
        s.seqLen = 256;
        s.steps = 1;

        // Training: the job file the page writes, as the worker reads and loads it.
        const std::string jobPath = dir.path() + "/job.json";
        {
          QFile f(QString::fromStdString(jobPath));
          ASSERT_TRUE(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
          f.write(s.toText());
        }
        auto job = worker::load_job(jobPath);
        ASSERT_TRUE(job.ok()) << job.status().to_string();
        auto config = ModelConfig::load(job->model_path);
        ASSERT_TRUE(config.ok()) << config.status().to_string();
        ASSERT_TRUE(job->tokenizer_path.empty());
        ASSERT_EQ(job->model_path, model);
        auto options = dataset_options(*job, *config);
        ASSERT_TRUE(options.ok()) << options.status().to_string();
        auto trained = Dataset::load(job->train_path, **tokenizer, *options);
        ASSERT_TRUE(trained.ok()) << trained.status().to_string();
        EXPECT_EQ(dataset_format_name(trained->format()), std::string(format));

        // The preview, as the page requests it.
        const DatasetPreview p = DatasetPreview::load(DatasetPreview::Request::of(s));
        ASSERT_TRUE(p.ok) << p.error.toStdString();
        EXPECT_EQ(p.chatTemplate.toStdString(), chat_template_name(trained->chat_template().kind));
        EXPECT_EQ(p.chatTemplateReason.toStdString(), trained->chat_template().reason);
        ASSERT_FALSE(p.samples.isEmpty());
        for (int i = 0; i < p.samples.size(); ++i) {
          const TokenSequence& seq = (*trained)[i];
          EXPECT_EQ(p.samples[i].ids, QVector<int>(seq.input_ids.begin(), seq.input_ids.end()))
              << "sample " << i;
          EXPECT_EQ(p.samples[i].labels, QVector<int>(seq.labels.begin(), seq.labels.end()))
              << "sample " << i << ": the preview's trained tokens differ from training's";
        }
      }
    }
  }
}

}  // namespace
}  // namespace spillway::ui

// Untrusted input end to end (issue 15 point 3), through the built worker as a user runs it: every
// bad file gets exit 2 (bad input) or 3 (plan: does not fit) and one line on stderr naming the
// file, the place and the fix, within seconds; values are quoted escaped and cut short; a FIFO is
// refused without blocking; SIGTERM inside a long step stops the run within seconds with a
// checkpoint.
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <thread>

#include "core/file-util.h"
#include "run-files.h"
#include "test-data.h"
#include "worker-process.h"

namespace spillway {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
using testing::of_type;
using testing::read_events;
using Clock = std::chrono::steady_clock;

class UntrustedInput : public ::testing::Test {
 protected:
  void SetUp() override {
    env_ = {"XDG_DATA_HOME=" + tmp_.path() + "/xdg", "OPENBLAS_THREAD_TIMEOUT=4"};
  }
  std::string write(const std::string& name, const std::string& text) {
    const std::string path = tmp_.path() + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string write_job(const std::string& name, const json& job) {
    return write(name + ".json", job.dump(2));
  }
  testing::ProcessResult worker(const std::vector<std::string>& args) {
    return testing::run_worker_process(args, env_, tmp_.path());
  }
  json good_job(const std::string& name) const {
    return {
        {"name", name},
        {"model", {{"path", testing::data_path("models/stories260K")}}},
        {"data",
         {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")}, {"seq_len", 32}}},
        {"train", {{"steps", 1}, {"micro_batch_size", 2}}},
        {"placement", {{"backend", "cpu"}}},
        {"output", {{"run_dir", tmp_.path() + "/" + name}}}};
  }
  // stderr is one line: "spillway-worker: ...\n", nothing before or after.
  static void expect_one_line(const std::string& err) {
    ASSERT_FALSE(err.empty());
    EXPECT_EQ(err.rfind("spillway-worker: ", 0), 0u) << err.substr(0, 600);
    EXPECT_EQ(std::count(err.begin(), err.end(), '\n'), 1) << err.substr(0, 600);
    EXPECT_EQ(err.back(), '\n') << err.substr(0, 600);
  }
  testing::TempDir tmp_;
  std::vector<std::string> env_;
};

// A job.json or config.json that is not JSON: the file, line and column, what was expected and
// the text there (was "bad.json: not valid JSON", and "corrupt", exit 1, for a config.json).
TEST_F(UntrustedInput, SyntaxErrorsInJobAndConfigNameLineAndColumn) {
  SPILLWAY_REQUIRE_DATA();
  const std::string job =
      write("bad.json",
            "{\"name\": \"t\",\n \"model\": {\"path\": \"x\"},\n \"data\": {\"train\": oops}}");
  auto r = worker({"plan", job});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_one_line(r.err);
  EXPECT_NE(r.err.find("bad.json:3:20: not valid JSON: syntax error while parsing value - invalid "
                       "literal, at \"oops}}\"; "
                       "fix the JSON there"),
            std::string::npos)
      << r.err;

  const std::string model = tmp_.path() + "/model";
  fs::create_directories(model);
  fs::create_symlink(testing::data_path("models/stories260K/model.safetensors"),
                     model + "/model.safetensors");
  write("model/config.json", "{\"dim\": 64,\n \"hidden_size\": [1,\n");
  json with_model = good_job("cfg");
  with_model["model"]["path"] = model;
  r = worker({"train", write_job("cfg", with_model)});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_one_line(r.err);
  EXPECT_NE(r.err.find("model/config.json:3:1: not valid JSON: syntax error while parsing value - "
                       "unexpected end of input"),
            std::string::npos)
      << r.err;
  EXPECT_NE(r.err.find("at the end of the text (is it cut short?)"), std::string::npos) << r.err;
}

// A tokenizer.json that is a FIFO was passed over for tokenizer.model: the run trained and then
// failed at export copying the FIFO (exit 1, minutes later). Now it is refused before training.
TEST_F(UntrustedInput, AFifoNamedTokenizerJsonIsRefusedBeforeTraining) {
  SPILLWAY_REQUIRE_DATA();
  const std::string model = tmp_.path() + "/model";
  fs::create_directories(model);
  for (const char* f :
       {"config.json", "model.safetensors", "tokenizer.model", "tokenizer_config.json"})
    fs::create_symlink(testing::data_path(std::string("models/stories260K/") + f), model + "/" + f);
  ASSERT_EQ(::mkfifo((model + "/tokenizer.json").c_str(), 0600), 0);
  json job = good_job("fifo");
  job["model"]["path"] = model;
  const auto t0 = Clock::now();
  auto r = worker({"train", write_job("fifo", job)});
  EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 20 * testing::kTimeScale);
  EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_one_line(r.err);
  EXPECT_NE(r.err.find(model + "/tokenizer.json is not a regular file (a FIFO, socket or device)"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/fifo/checkpoints")) << "nothing was trained";
}

// Was "cannot hold out 10.000000% for evaluation from 1 sequence(s)", naming neither the file nor
// the key.
TEST_F(UntrustedInput, EvalFractionOfATinyDatasetNamesTheFileAndTheKey) {
  SPILLWAY_REQUIRE_DATA();
  json job = good_job("tiny");
  job["data"]["train"] = write("tiny.txt", "hello world\n");
  job["data"]["eval_fraction"] = 0.1;
  auto r = worker({"train", write_job("tiny", job)});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  expect_one_line(r.err);
  EXPECT_NE(r.err.find("tiny.txt: data.eval_fraction 0.1 cannot hold out a sequence for evaluation "
                       "from the dataset's only "
                       "sequence; use a larger dataset, a shorter data.seq_len, a data.eval file, "
                       "or data.eval_fraction 0"),
            std::string::npos)
      << r.err;
}

// `plan --json` exited 3 with nothing on stderr when the job did not fit.
TEST_F(UntrustedInput, PlanThatDoesNotFitSaysWhyOnStderrEvenWithJson) {
  SPILLWAY_REQUIRE_DATA();
  json job = good_job("long");
  job["data"]["seq_len"] = 4096;  // stories260K has 512 positions
  const std::string path = write_job("long", job);
  for (const bool as_json : {true, false}) {
    auto r = as_json ? worker({"plan", path, "--json"}) : worker({"plan", path});
    EXPECT_EQ(r.exit_code, 3) << r.err;
    expect_one_line(r.err);
    EXPECT_NE(r.err.find("long.json: does not fit: data.seq_len 4096 is beyond the model's "
                         "max_position_embeddings 512; "
                         "lower data.seq_len"),
              std::string::npos)
        << r.err;
    if (as_json) EXPECT_FALSE(json::parse(r.out)["fits"].get<bool>());
  }
}

// 65,536 sequences of 2^20 tokens: the plan's int arithmetic wrapped to 0 tokens a micro-batch and
// the job was planned as fitting, HBM 0.0 GB (exit 0). The products of sizes have their limits too.
TEST_F(UntrustedInput, SizesWhoseProductsOverflowAreRefused) {
  SPILLWAY_REQUIRE_DATA();
  json job = good_job("huge");
  job["model"] = {{"init",
                   {{"architectures", {"LlamaForCausalLM"}},
                    {"vocab_size", 258},
                    {"hidden_size", 256},
                    {"intermediate_size", 688},
                    {"num_hidden_layers", 6},
                    {"num_attention_heads", 8},
                    {"num_key_value_heads", 4},
                    {"max_position_embeddings", 1 << 20}}},
                  {"tokenizer", "builtin:bytes"}};
  job["data"]["seq_len"] = 1 << 20;
  job["train"]["micro_batch_size"] = 1 << 16;
  job["train"]["grad_accum"] = 1 << 16;
  for (const char* command : {"plan", "train"}) {
    auto r = worker({command, write_job("huge", job)});
    EXPECT_EQ(r.exit_code, 2) << r.err;
    expect_one_line(r.err);
    EXPECT_NE(r.err.find("huge.json: job.json: train.micro_batch_size x data.seq_len is "
                         "68719476736 tokens a micro-batch, more "
                         "than 16777216; lower train.micro_batch_size (and raise train.grad_accum) "
                         "or data.seq_len"),
              std::string::npos)
        << r.err;
  }
  job["data"]["seq_len"] = 16;
  job["train"]["micro_batch_size"] = 1024;
  auto r = worker({"plan", write_job("huge", job)});
  EXPECT_EQ(r.exit_code, 2) << r.err;
  EXPECT_NE(r.err.find("train.micro_batch_size x train.grad_accum is 67108864 sequences a step, "
                       "more than 1048576"),
            std::string::npos)
      << r.err;
  EXPECT_FALSE(fs::exists(tmp_.path() + "/huge")) << "nothing was started";
}

// A tokenizer.json field of the wrong type named the file only ("a field has the wrong type or is
// missing ([json.exception.type_error.302] ...)"); an added token's id past int32 was wrapped into
// another id. Now the part and the key.
TEST_F(UntrustedInput, TokenizerFieldsOfTheWrongTypeNameThePart) {
  SPILLWAY_REQUIRE_DATA();
  auto text = read_file(testing::data_path("tokenizers/llama2/tokenizer.json"));
  ASSERT_TRUE(text.ok());
  const json original = json::parse(*text);
  json null_flag = original, huge_id = original;
  null_flag["model"]["byte_fallback"] = nullptr;
  huge_id["added_tokens"][0]["id"] = int64_t{1} << 40;
  for (
      const auto& [tok, expected] :
      {std::pair{
           null_flag,
           "tokenizer.json: model: a field has the wrong type (type must be boolean, but is null)"},
       std::pair{
           huge_id,
           "tokenizer.json: added_tokens[0]: id: expected a whole number from 0 to 2147483647, got "
           "1099511627776"}}) {
    const std::string path = write("tokenizer.json", tok.dump());
    auto r = worker({"tokenize", "--tokenizer", path});
    EXPECT_EQ(r.exit_code, 1)
        << r.err;  // tokenize: a tokenizer that does not load is a failure (README)
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err.substr(0, 600);
    EXPECT_EQ(std::count(r.err.begin(), r.err.end(), '\n'), 1) << r.err.substr(0, 600);
  }
}

// eval and generate: --seq-len 5.9 ran as 5 and 100000 past stories260K's 512 positions (both for
// minutes), 99999999999 wrapped to a negative int ("streaming: logits_tokens must not be
// negative"), and --temperature nan sampled with NaN, exit 0. Now refused at once, naming the
// option.
TEST_F(UntrustedInput, EvalAndGenerateOptionsAreCheckedBeforeAnythingRuns) {
  SPILLWAY_REQUIRE_DATA();
  const std::string model = testing::data_path("models/stories260K");
  const std::string data = testing::data_path("datasets/tinyshakespeare/input.txt");
  const std::vector<std::pair<std::vector<std::string>, std::string>> cases = {
      {{"eval", "--model", model, "--data", data, "--seq-len", "5.9"},
       "option --seq-len expects a whole decimal number from 2 to 1048576, got '5.9'"},
      {{"eval", "--model", model, "--data", data, "--seq-len", "99999999999"},
       "option --seq-len expects a whole decimal number from 2 to 1048576, got '99999999999'"},
      {{"eval", "--model", model, "--data", data, "--seq-len", "1024"},
       "--seq-len 1024 is beyond the model's max_position_embeddings 512; lower --seq-len"},
      {{"eval", "--model", model, "--data", data, "--seq-len", "512", "--batch", "65536"},
       "--batch x --seq-len is 33554432 tokens, more than 16777216; lower --batch or --seq-len"},
      {{"generate", "--model", model, "--prompt", "hi", "--temperature", "nan"},
       "option --temperature expects a decimal number (such as 0.7 or 1e-3), got 'nan'"},
      {{"generate", "--model", model, "--prompt", "hi", "--max-new-tokens", "5.5"},
       "option --max-new-tokens expects a whole decimal number from 1 to 4096, got '5.5'"},
  };
  for (const auto& [args, expected] : cases) {
    const auto t0 = Clock::now();
    auto r = worker(args);
    EXPECT_LT(std::chrono::duration<double>(Clock::now() - t0).count(), 10 * testing::kTimeScale)
        << expected;
    EXPECT_EQ(r.exit_code, 2) << r.err;
    expect_one_line(r.err);
    EXPECT_NE(r.err.find(expected), std::string::npos) << r.err;
    EXPECT_TRUE(r.out.empty()) << r.out.substr(0, 300);
  }
}

// A key or a value of a megabyte with newlines in it is quoted escaped and cut short.
TEST_F(UntrustedInput, ValuesInMessagesAreEscapedAndCutShort) {
  SPILLWAY_REQUIRE_DATA();
  const std::string huge = "line one\nline two\x1b" + std::string(1 << 20, 'x');
  json bad_key = good_job("key");
  bad_key["train"][huge] = 1;
  json bad_enum = good_job("enum");
  bad_enum["data"]["format"] = huge;
  json bad_type = good_job("type");
  bad_type["train"]["steps"] = huge;
  for (const auto& [name, job] :
       {std::pair{"key", bad_key}, std::pair{"enum", bad_enum}, std::pair{"type", bad_type}}) {
    auto r = worker({"plan", write_job(name, job)});
    EXPECT_EQ(r.exit_code, 2) << name << ": " << r.err.substr(0, 300);
    expect_one_line(r.err);
    EXPECT_LT(r.err.size(), 600u) << name << ": " << r.err.substr(0, 600);
    EXPECT_NE(r.err.find(R"("line one\nline two\u001Bxxxx)"), std::string::npos)
        << name << ": " << r.err.substr(0, 600);
    EXPECT_NE(r.err.find("(1048594 bytes)"), std::string::npos)
        << name << ": " << r.err.substr(0, 600);
  }
}

// SIGTERM was read only between steps: a step of minutes ran to its end first (issue 15: a
// 10-minute step did not stop). The engine now checks between micro-batches and layers: the
// step is dropped unapplied, the last finished step checkpointed (here step 0: the first step is
// cut short), its batch kept for the resume, and the run is stopped within seconds.
TEST_F(UntrustedInput, SigtermStopsWithinALongStep) {
  SPILLWAY_REQUIRE_DATA();
  const std::string run_dir = tmp_.path() + "/long";
  // 64 micro-batches of 1024 tokens through 6 layers: about 80 s a step on two cores here.
  json job = {{"name", "long step"},
              {"model", {{"init", "llama-byte-5m"}, {"tokenizer", "builtin:bytes"}}},
              {"data",
               {{"train", testing::data_path("datasets/tinyshakespeare/input.txt")},
                {"seq_len", 1024},
                {"eval_fraction", 0}}},
              {"train",
               {{"steps", 2},
                {"micro_batch_size", 1},
                {"grad_accum", 64},
                {"eval_every", 0},
                {"checkpoint_every", 0}}},
              {"placement", {{"backend", "cpu"}}},
              {"output", {{"run_dir", run_dir}}}};
  const std::string err = tmp_.path() + "/long.err";
  pid_t pid = testing::spawn_worker({"train", write_job("long", job)}, env_,
                                    tmp_.path() + "/long.out", err);
  ASSERT_GT(pid, 0);
  bool training = false;
  for (int i = 0; i < 600 && !training; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    if (fs::exists(run_dir + "/events.jsonl")) {
      for (const json& e : of_type(read_events(run_dir), "state"))
        training |= e["state"] == "training";
    }
  }
  ASSERT_TRUE(training) << testing::slurp(err);
  std::this_thread::sleep_for(std::chrono::seconds(2));  // well inside the first step
  const auto t0 = Clock::now();
  kill(pid, SIGTERM);
  const int code = testing::wait_exit(pid);
  const double stop_s = std::chrono::duration<double>(Clock::now() - t0).count();
  EXPECT_EQ(code, 0) << testing::slurp(err);
  EXPECT_LT(stop_s, 10 * testing::kTimeScale);
  std::printf("stopped %.2f s after SIGTERM\n", stop_s);
  const auto events = read_events(run_dir);
  EXPECT_TRUE(of_type(events, "step").empty()) << "the first step was cut short, not finished";
  EXPECT_EQ(of_type(events, "state").back()["state"], "stopped");
  ASSERT_EQ(of_type(events, "checkpoint").size(), 1u);
  EXPECT_EQ(of_type(events, "checkpoint").back()["step"], 0);
  auto state = read_file(run_dir + "/checkpoints/step-000000/trainer_state.json");
  ASSERT_TRUE(state.ok()) << state.status().to_string();
  const json s = json::parse(*state);
  EXPECT_EQ(s["step"], 0);
  EXPECT_EQ(s["data_cursor"]["index"], 0) << "the dropped step's batch is read again on resume";
  EXPECT_FALSE(fs::exists(run_dir + "/export"));
}

}  // namespace
}  // namespace spillway

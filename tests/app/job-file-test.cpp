// The job file's numbers: out-of-range values are errors naming the key and the range, never
// wrapped into an int or carried into the planner's arithmetic (issue 15's fuzzing found both).
#include "worker/job-file.h"

#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

namespace spillway {
namespace {
using nlohmann::json;
using worker::parse_job;

json valid_job() {
  return {{"name", "n"},
          {"model", {{"init", "llama-tiny"}, {"tokenizer", "builtin:bytes"}}},
          {"data", {{"train", "/t.txt"}}},
          {"train", {{"steps", 10}}}};
}

TEST(JobFile, NumbersOutOfRangeAreNamedErrors) {
  ASSERT_TRUE(parse_job(valid_job()).ok()) << parse_job(valid_job()).status().to_string();
  const std::tuple<const char*, const char*, json, const char*> bad[] = {
      {"train", "micro_batch_size", 4294967300LL,
       "train.micro_batch_size must be in [1, 65536]"},  // wrapped to 4
      {"train", "grad_accum", 0, "train.grad_accum must be in [1, 65536]"},
      {"train", "steps", -1, "train.steps must be in [0, 1099511627776]"},
      {"train", "steps", 18446744073709551615ULL, "train.steps must be in"},
      {"train", "lr", 1e300,
       "train.lr must be in (0, 10]"},  // trained to NaN and exported a NaN model
      {"train", "lr", 0, "train.lr must be in (0, 10]"},
      {"train", "warmup_steps", -5, "train.warmup_steps must be in"},
      {"train", "eps", -1e-8, "train.eps must be in [0, 1]"},
      {"train", "min_lr_ratio", 2, "train.min_lr_ratio must be in [0, 1]"},
      {"train", "keep_checkpoints", 1LL << 40, "train.keep_checkpoints must be in"},
      {"data", "seq_len", 1, "data.seq_len must be in [2, 1048576]"},
      {"data", "seq_len", 1LL << 33, "data.seq_len must be in"},
      {"placement", "weight_slots", 1000, "placement.weight_slots must be in [2, 64]"},
  };
  for (const auto& [section, key, value, message] : bad) {
    json j = valid_job();
    j[section][key] = value;
    auto job = parse_job(j);
    ASSERT_FALSE(job.ok()) << section << "." << key << " = " << value.dump();
    EXPECT_EQ(job.status().code(), ErrorCode::kInvalidArgument);
    EXPECT_NE(job.status().message().find(message), std::string::npos) << job.status().message();
  }
}

// A value of the wrong type is quoted by its start only: a megabyte string is not echoed back.
TEST(JobFile, WrongTypeQuotesTheValuesStart) {
  json j = valid_job();
  j["train"]["lr"] = std::string(1 << 20, 'x');
  auto job = parse_job(j);
  ASSERT_FALSE(job.ok());
  EXPECT_LT(job.status().message().size(), 200u) << job.status().message().substr(0, 200);
  EXPECT_NE(job.status().message().find("train.lr: expected a number, got \"xxx"),
            std::string::npos);
}

}  // namespace
}  // namespace spillway

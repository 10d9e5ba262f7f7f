#include "telemetry/event-writer.h"

#include <gtest/gtest.h>

#include <sstream>
#include <thread>
#include <vector>

#include "core/file-util.h"
#include "test-data.h"

namespace spillway {
namespace {

using Json = nlohmann::json;

std::vector<Json> read_lines(const std::string& path) {
  auto text = read_file(path);
  EXPECT_TRUE(text.ok());
  std::vector<Json> out;
  std::istringstream in(text.ok() ? *text : std::string());
  std::string line;
  while (std::getline(in, line)) {
    Json j = Json::parse(line, nullptr, /*allow_exceptions=*/false);
    EXPECT_FALSE(j.is_discarded()) << "not JSON: " << line;
    out.push_back(j);
  }
  return out;
}

TEST(EventWriter, EveryLineIsJsonWithTypeAndT) {
  testing::TempDir dir;
  std::string run_dir = dir.file("run");
  {
    auto w = EventWriter::open(run_dir);
    ASSERT_TRUE(w.ok()) << w.status().to_string();
    EventWriter& ew = **w;
    ASSERT_TRUE(ew.state("training", {{"step", 0}}).ok());
    ASSERT_TRUE(ew.sample({{"rss_bytes", 123}}).ok());
    ASSERT_TRUE(ew.step({{"step", 1}, {"loss", 2.5}}).ok());
    double t0 = ew.now_s();
    ASSERT_TRUE(ew.span(block_span(4, 32, "forward", t0, t0 + 0.01)).ok());     // layer 3
    ASSERT_TRUE(ew.span(block_span(33, 32, "optimizer", t0, t0 + 0.02)).ok());  // the head
    ASSERT_TRUE(ew.log(LogLevel::kWarn, "bad \xff byte").ok());
    ASSERT_TRUE(ew.error(io_error("disk gone")).ok());
    ASSERT_TRUE(ew.checkpoint({{"step", 1}, {"path", "ckpt/1"}}).ok());
    ASSERT_TRUE(ew.eval({{"step", 1}, {"loss", 2.0}}).ok());
    ASSERT_TRUE(ew.emit("custom", {{"type", "ignored"}, {"t", -5}, {"x", 1}}).ok());
    ASSERT_TRUE(ew.emit("scalar", Json(42)).ok());
    EXPECT_EQ(ew.lines_written(), 11u);
  }
  auto lines = read_lines(run_dir + "/events.jsonl");
  ASSERT_EQ(lines.size(), 11u);
  const char* types[] = {"state", "sample",     "step", "span",   "span",  "log",
                         "error", "checkpoint", "eval", "custom", "scalar"};
  double prev_t = 0.0;
  for (size_t i = 0; i < lines.size(); ++i) {
    ASSERT_TRUE(lines[i].contains("type"));
    ASSERT_TRUE(lines[i].contains("t"));
    EXPECT_EQ(lines[i]["type"], types[i]);
    double t = lines[i]["t"].get<double>();
    EXPECT_GE(t, prev_t);
    prev_t = t;
  }
  EXPECT_EQ(lines[0]["state"], "training");
  EXPECT_EQ(lines[0]["step"], 0);
  EXPECT_EQ(lines[2]["loss"], 2.5);
  EXPECT_EQ(lines[3]["layer"], 3);
  EXPECT_EQ(lines[3]["phase"], "forward");
  EXPECT_TRUE(lines[4]["layer"].is_null());
  EXPECT_EQ(lines[5]["level"], "warn");
  EXPECT_EQ(lines[6]["code"], "io");
  EXPECT_EQ(lines[6]["message"], "disk gone");
  EXPECT_EQ(lines[9]["x"], 1);
  EXPECT_GE(lines[9]["t"].get<double>(), 0.0);
  EXPECT_EQ(lines[10]["value"], 42);
}

TEST(EventWriter, TypeAndTComeFirst) {
  testing::TempDir dir;
  auto w = EventWriter::open_file(dir.file("e.jsonl"));
  ASSERT_TRUE(w.ok());
  ASSERT_TRUE((*w)->step({{"aaa", 1}}).ok());
  auto text = read_file(dir.file("e.jsonl"));
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text->rfind("{\"type\":\"step\",\"t\":", 0), 0u) << *text;
}

TEST(EventWriter, ReopenAppendsAndRepairsTornLine) {
  testing::TempDir dir;
  std::string path = dir.file("events.jsonl");
  {
    auto w = EventWriter::open_file(path);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->state("training").ok());
  }
  // A worker killed mid-line leaves a partial object without a newline.
  {
    auto text = read_file(path);
    ASSERT_TRUE(write_file_atomic(path, *text + "{\"type\":\"step\",\"t\":1.0,\"lo").ok());
  }
  {
    auto w = EventWriter::open_file(path, /*t_offset_s=*/100.0);
    ASSERT_TRUE(w.ok());
    ASSERT_TRUE((*w)->state("resumed").ok());
  }
  auto text = read_file(path);
  ASSERT_TRUE(text.ok());
  std::istringstream in(*text);
  std::string line;
  std::vector<Json> good;
  int bad = 0;
  while (std::getline(in, line)) {
    Json j = Json::parse(line, nullptr, false);
    if (j.is_discarded()) {
      ++bad;
    } else {
      good.push_back(j);
    }
  }
  EXPECT_EQ(bad, 1);  // only the torn line itself
  auto last = EventWriter::last_t_s(path);
  ASSERT_TRUE(last.has_value());
  EXPECT_GE(*last, 100.0);
  EXPECT_FALSE(EventWriter::last_t_s(dir.file("missing.jsonl")).has_value());
  ASSERT_EQ(good.size(), 2u);
  EXPECT_EQ(good[1]["state"], "resumed");
  EXPECT_GE(good[1]["t"].get<double>(), 100.0);
}

TEST(EventWriter, ConcurrentWritersProduceWholeLines) {
  testing::TempDir dir;
  auto w = EventWriter::open(dir.path());
  ASSERT_TRUE(w.ok());
  EventWriter* ew = w->get();
  std::vector<std::thread> threads;
  for (int i = 0; i < 4; ++i) {
    threads.emplace_back([ew, i] {
      for (int k = 0; k < 200; ++k)
        (void)ew->step({{"thread", i}, {"k", k}, {"pad", std::string(100, 'x')}});
    });
  }
  for (auto& t : threads) t.join();
  auto lines = read_lines(dir.file("events.jsonl"));
  EXPECT_EQ(lines.size(), 800u);
}

TEST(EventWriter, LogSinkForwardsLines) {
  testing::TempDir dir;
  auto w = EventWriter::open(dir.path());
  ASSERT_TRUE(w.ok());
  set_log_sink((*w)->log_sink());
  log_info("hello from the log");
  set_log_sink(nullptr);
  auto lines = read_lines(dir.file("events.jsonl"));
  ASSERT_EQ(lines.size(), 1u);
  EXPECT_EQ(lines[0]["type"], "log");
  EXPECT_EQ(lines[0]["message"], "hello from the log");
}

TEST(EventWriter, UnwritableDirectoryIsAnError) {
  auto w = EventWriter::open_file("/proc/spillway-cannot-exist/events.jsonl");
  EXPECT_FALSE(w.ok());
}

}  // namespace
}  // namespace spillway

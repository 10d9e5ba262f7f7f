// The New run page's dataset preview (issue 13, "the window freezes"): the bounded sample and its
// record boundaries, binary files refused, cancellation, and a long sequence length in bounded
// time.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QTextDocument>
#include <filesystem>
#include <fstream>
#include <thread>

#include "DatasetPreview.h"
#include "DatasetSample.h"
#include "test-data.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::data_path;
using spillway::testing::TempDir;

QString q(const std::string& s) {
  return QString::fromStdString(s);
}

QString shakespeare() {
  return q(data_path("datasets/tinyshakespeare/input.txt"));
}

QString stories260K() {
  return q(data_path("models/stories260K"));
}

// `copies` times tinyshakespeare in one file (50: the issue's 55 MB paste).
std::string repeatedShakespeare(const TempDir& dir, int copies) {
  std::ifstream in(data_path("datasets/tinyshakespeare/input.txt"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string path = dir.file("shakespeare-x" + std::to_string(copies) + ".txt");
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < copies; ++i) out << text;
  return path;
}

std::string binaryFile(const TempDir& dir) {
  const std::string path = dir.file("weights.txt");  // the extension does not make it text
  std::ofstream out(path, std::ios::binary);
  out << std::string("\x89PNG\r\n\x1a\n\0\0\0\rIHDR", 16);
  for (int i = 0; i < 4096; ++i) out.put(static_cast<char>((i * 7919) & 0xFF));
  return path;
}

// ---- DatasetSample -------------------------------------------------------------------------

TEST(DatasetSample, CutsAfterTheLastWholeLineOrListElement) {
  TempDir dir;
  {
    std::ofstream f(dir.file("lines.jsonl"));
    for (int i = 0; i < 1000; ++i)
      f << R"({"text": "record )" << i << R"("})"
        << "\n";
  }
  DatasetSample lines = DatasetSample::read(q(dir.file("lines.jsonl")), 1000, true);
  ASSERT_TRUE(lines.ok()) << lines.error.toStdString();
  EXPECT_FALSE(lines.whole);
  EXPECT_LE(lines.readBytes, 1000);
  EXPECT_TRUE(lines.bytes.endsWith("\"}\n"));
  EXPECT_EQ(lines.fileBytes, static_cast<qint64>(fs::file_size(dir.file("lines.jsonl"))));

  // A list whose strings hold the characters that would fool a naive cut.
  {
    std::ofstream f(dir.file("list.json"));
    f << "[\n";
    for (int i = 0; i < 2000; ++i)
      f << (i ? ",\n" : "")
        << R"(  {"instruction": "say \"[, ]\" {x}", "input": "", "output": "ok )" << i << R"("})";
    f << "\n]\n";
  }
  DatasetSample list = DatasetSample::read(q(dir.file("list.json")), 4000, true);
  ASSERT_TRUE(list.ok()) << list.error.toStdString();
  EXPECT_FALSE(list.whole);
  EXPECT_TRUE(list.bytes.endsWith("}]"));
  QJsonParseError error;
  const QJsonDocument doc = QJsonDocument::fromJson(list.bytes, &error);
  ASSERT_TRUE(doc.isArray()) << error.errorString().toStdString();
  EXPECT_GT(doc.array().size(), 10);
  EXPECT_LT(doc.array().size(), 2000);

  // One record longer than the limit is read to its end; a small file is read whole.
  std::ofstream(dir.file("long.jsonl"))
      << R"({"text": ")" << std::string(5000, 'a') << "\"}\n{\"text\": \"b\"}\n";
  DatasetSample longLine = DatasetSample::read(q(dir.file("long.jsonl")), 1000, true);
  ASSERT_TRUE(longLine.ok());
  EXPECT_EQ(longLine.bytes.count('\n'), 1);
  DatasetSample whole = DatasetSample::read(shakespeare(), 10'000'000, false);
  EXPECT_TRUE(whole.whole);
  EXPECT_EQ(whole.bytes.size(), 1115394);

  // Plain text without a line break is cut on a character boundary.
  std::ofstream(dir.file("one-line.txt")) << [] {
    std::string s;
    for (int i = 0; i < 1000; ++i) s += "é";
    return s;
  }();
  DatasetSample text = DatasetSample::read(q(dir.file("one-line.txt")), 999, false);
  ASSERT_TRUE(text.ok());
  EXPECT_EQ(text.bytes.size() % 2, 0);
  EXPECT_TRUE(DatasetSample::notTextReason(text.bytes, "x").isEmpty());
}

TEST(DatasetSample, RefusesBinaryFilesFifosAndFolders) {
  TempDir dir;
  const QString png = q(binaryFile(dir));
  DatasetSample binary = DatasetSample::read(png, 1'000'000, false);
  EXPECT_FALSE(binary.ok());
  EXPECT_TRUE(binary.error.contains("is not a text file: byte 8 is NUL"))
      << binary.error.toStdString();
  EXPECT_TRUE(binary.error.contains("A dataset is UTF-8 text"));

  EXPECT_TRUE(DatasetSample::notTextReason(QByteArray("\x1F\x8B\x08\x00", 4), "d.jsonl")
                  .startsWith("d.jsonl is a gzip file, not text."));
  EXPECT_TRUE(DatasetSample::notTextReason("PAR1\x15\x04", "d.parquet").contains("a Parquet file"));
  EXPECT_TRUE(DatasetSample::notTextReason("\xFF\xFEh\x00i\x00", "d.txt").contains("UTF-16"));
  QByteArray noise;
  for (int i = 0; i < 4096; ++i) noise += static_cast<char>(0x80 + (i * 31) % 0x7F + 1);
  EXPECT_TRUE(DatasetSample::notTextReason(noise, "n.txt").contains("invalid UTF-8"));
  // Real text, accents and a stray Latin-1 byte included, is text.
  EXPECT_TRUE(
      DatasetSample::notTextReason("Füße über Straßen\tnaïve\r\n\xE4 ok", "t.txt").isEmpty());

  ASSERT_EQ(::mkfifo(dir.file("fifo.txt").c_str(), 0600), 0);
  QElapsedTimer t;
  t.start();
  DatasetSample fifo = DatasetSample::read(q(dir.file("fifo.txt")), 1000, false);
  EXPECT_LT(t.elapsed(), 1000);  // refused before opening: no wait for a writer
  EXPECT_TRUE(fifo.error.contains("not a regular file")) << fifo.error.toStdString();
  EXPECT_TRUE(DatasetSample::read(q(dir.path()), 1000, false).error.contains("is a folder"));
  EXPECT_TRUE(
      DatasetSample::read(q(dir.file("none.txt")), 1000, false).error.contains("does not exist"));
}

// ---- DatasetPreview ------------------------------------------------------------------------

TEST(DatasetPreview, BinaryFileIsRefusedWithAClearMessage) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  DatasetPreview p = DatasetPreview::load(q(binaryFile(dir)), stories260K(), 256);
  EXPECT_FALSE(p.ok);
  EXPECT_TRUE(p.error.contains("is not a text file")) << p.error.toStdString();
}

TEST(DatasetPreview, SamplesALargeFileAndStopsWhenCancelled) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  const std::string big = repeatedShakespeare(dir, 12);
  QElapsedTimer t;
  t.start();
  DatasetPreview p = DatasetPreview::load(q(big), stories260K(), 256);
  const qint64 ms = t.elapsed();
  ASSERT_TRUE(p.ok) << p.error.toStdString();
  std::printf("13.4 MB file, seq 256: preview in %lld ms\n", static_cast<long long>(ms));
  EXPECT_TRUE(p.sampled);
  EXPECT_EQ(p.fileBytes, 12 * 1115394);
  EXPECT_GT(p.sampleBytes, 900'000);
  EXPECT_LE(p.sampleBytes, 1'000'000);
  EXPECT_EQ(p.examples, 1);  // one document: tinyshakespeare has no <|endoftext|>
  EXPECT_GT(p.totalTokens, 500'000);
  EXPECT_LT(p.totalTokens, 700'000);  // of the sample, not of 13 MB (about 8.3 M)

  // Cancelled before it starts: nothing is read. Cancelled while it runs: it ends early.
  std::atomic<bool> cancel{true};
  DatasetPreview::Request r;
  r.path = q(big);
  r.tokenizerPath = stories260K();
  r.seqLen = 256;
  r.sampleBytes = 1LL << 40;  // the whole file: about 4 s of tokenizing
  r.generation = 7;
  DatasetPreview early = DatasetPreview::load(r, &cancel);
  EXPECT_TRUE(early.cancelled);
  EXPECT_FALSE(early.ok);
  EXPECT_EQ(early.generation, 7u);
  cancel = false;
  std::thread canceller([&cancel] {
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
    cancel = true;
  });
  t.restart();
  DatasetPreview stopped = DatasetPreview::load(r, &cancel);
  canceller.join();
  EXPECT_TRUE(stopped.cancelled);
  std::printf("cancelled 5 ms into a whole-file load: returned after %lld ms\n",
              static_cast<long long>(t.elapsed()));
}

TEST(DatasetPreview, ARecordTheSampleCannotCutIsReadWhole) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  // One object over several lines, longer than the sample: the cut breaks it, so the whole file is
  // read, and a real error is still the worker's.
  std::ofstream(dir.file("one.json")) << "{\n  \"text\": \"" << std::string(3000, 'a') << "\"\n}\n";
  DatasetPreview::Request r;
  r.path = q(dir.file("one.json"));
  r.tokenizerPath = stories260K();
  r.seqLen = 64;
  r.sampleBytes = 100;
  DatasetPreview p = DatasetPreview::load(r);
  ASSERT_TRUE(p.ok) << p.error.toStdString();
  EXPECT_EQ(p.examples, 1);
  std::ofstream(dir.file("bad.jsonl")) << "{\"text\": \"ok\"}\n{\"text\": 3}\n"
                                       << std::string(200, '\n');
  r.path = q(dir.file("bad.jsonl"));
  p = DatasetPreview::load(r);
  EXPECT_TRUE(p.error.contains("bad.jsonl:2")) << p.error.toStdString();
}

TEST(DatasetPreview, LongSequenceShowsItsFirstTokensInBoundedTime) {
  SPILLWAY_REQUIRE_DATA();
  QElapsedTimer t;
  t.start();
  DatasetPreview p = DatasetPreview::load(shakespeare(), stories260K(), 100000);
  const qint64 ms = t.elapsed();
  ASSERT_TRUE(p.ok) << p.error.toStdString();
  std::printf("tinyshakespeare, seq 100000: preview in %lld ms\n", static_cast<long long>(ms));
  EXPECT_LT(ms, 10000);
  EXPECT_EQ(p.seqLen, 100000);
  EXPECT_GE(p.sequences, 6);
  EXPECT_TRUE(p.previewHtml.contains("more tokens"));
  // Each token decoded with a short context reads as the text does: spaces and line breaks kept.
  QTextDocument doc;
  doc.setHtml(p.previewHtml);
  EXPECT_TRUE(doc.toPlainText().contains(
      QString("First Citizen:↵\nBefore we proceed any further, hear me speak.")))
      << doc.toPlainText().left(300).toStdString();
}

}  // namespace
}  // namespace spillway::ui

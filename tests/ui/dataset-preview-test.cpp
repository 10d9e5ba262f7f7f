// The New run page's dataset preview off the GUI thread (issue 13, "the window freezes"): the
// bounded sample and its record boundaries, binary files refused, the loader's pause, generations
// and cancellation, and the real page: typing a path starts one load, a change of the sequence
// length or a 55 MB file returns to the event loop at once and the preview comes later.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <QComboBox>
#include <QElapsedTimer>
#include <QJsonArray>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>
#include <QTextDocument>
#include <QTimer>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <thread>

#include "DatasetPreview.h"
#include "DatasetPreviewLoader.h"
#include "DatasetSample.h"
#include "NewRunPage.h"
#include "event-loop-watch.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::data_path;
using spillway::testing::TempDir;

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
  SPILLWAY_REQUIRE_DATA();  // tiny Shakespeare, and the golden files
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
  EXPECT_LT(
      t.elapsed(),
      1000 * ::spillway::testing::kTimeScale);  // refused before opening: no wait for a writer
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
  r.modelPath = r.tokenizerPath = stories260K();
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
  r.modelPath = r.tokenizerPath = stories260K();
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
  EXPECT_LT(ms, 10000 * ::spillway::testing::kTimeScale);
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

// ---- DatasetPreviewLoader ------------------------------------------------------------------

TEST(DatasetPreviewLoader, DropsAStaleResultAndCancelsItsLoad) {
  std::mutex mutex;
  QStringList loaded;
  std::atomic<bool> releaseFirst{false}, firstSawCancel{false};
  Qt::HANDLE loadedOn = nullptr;
  DatasetPreviewLoader loader(
      [&](const DatasetPreview::Request& r, const std::atomic<bool>& cancel) {
        {
          std::lock_guard lock(mutex);
          loaded << r.path;
          loadedOn = QThread::currentThreadId();
        }
        // The first load is one that cannot stop where it is (a tokenizer call): it finishes
        // after it has been cancelled, and its answer must not be shown.
        while (r.path == "first" && !releaseFirst) QThread::msleep(2);
        if (r.path == "first") firstSawCancel = cancel.load();
        DatasetPreview p;
        p.ok = true;
        p.format = r.path;
        p.generation = r.generation;
        return p;
      },
      nullptr);
  loader.setDelay(30);
  QSignalSpy started(&loader, &DatasetPreviewLoader::started);
  QSignalSpy finished(&loader, &DatasetPreviewLoader::finished);
  DatasetPreview::Request first;
  first.path = "first";
  loader.request(first);
  EXPECT_TRUE(loader.busy());
  ASSERT_TRUE(started.wait(5000));
  const quint64 firstGeneration = started.at(0).at(0).toULongLong();
  DatasetPreview::Request second;
  second.path = "second";
  loader.request(second);  // the path changed during the first load
  EXPECT_GT(loader.generation(), firstGeneration);
  releaseFirst = true;
  ASSERT_TRUE(finished.wait(5000));
  QTest::qWait(200);  // time for a stale answer to arrive, were it delivered
  ASSERT_EQ(finished.size(), 1);
  const auto shown = finished.at(0).at(0).value<DatasetPreview>();
  EXPECT_EQ(shown.format, "second");
  EXPECT_EQ(shown.generation, loader.generation());
  EXPECT_TRUE(firstSawCancel);
  EXPECT_EQ(loader.startedCount(), 2);
  EXPECT_EQ(loader.droppedCount(), 1);
  EXPECT_FALSE(loader.busy());
  EXPECT_NE(loadedOn, QThread::currentThreadId());

  // cancel() drops a pending request: nothing starts.
  loader.request(first);
  loader.cancel();
  QTest::qWait(100);
  EXPECT_EQ(loader.startedCount(), 2);
  EXPECT_FALSE(loader.busy());
}

// ---- the page ------------------------------------------------------------------------------

// A page with stories260K chosen, shown, with nothing loading.
std::unique_ptr<NewRunPage> pageWithModel() {
  auto page = std::make_unique<NewRunPage>();
  page->setModelPath(stories260K());
  page->show();
  EXPECT_TRUE(QTest::qWaitForWindowExposed(page.get()));
  EXPECT_TRUE(page->modelInfo().ok) << page->modelInfo().error.toStdString();
  return page;
}

QString labelText(const NewRunPage& page) {
  auto* label = page.findChild<QLabel*>("datasetLabel");
  return label ? label->text() : QString();
}

TEST(NewRunPage, TypingAPathStartsOneLoadAfterThePause) {
  SPILLWAY_REQUIRE_DATA();
  auto page = pageWithModel();
  auto* field = page->findChild<QComboBox*>("datasetPath");
  ASSERT_NE(field, nullptr);
  // A recent dataset: the field completes to it on every key, as in the issue.
  field->addItem(shakespeare());
  field->setCurrentText(QString());  // the first item added became the current one
  QSignalSpy started(page->datasetLoader(), &DatasetPreviewLoader::started);
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  field->lineEdit()->setFocus();
  // A fast typist: a key every 40 ms. Each key's handling (the completion and the page's slot) is
  // timed on its own.
  qint64 slowestKeyUs = 0;
  for (const QChar c : shakespeare()) {
    QElapsedTimer t;
    t.start();
    QTest::keyClick(field->lineEdit(), c.toLatin1());
    slowestKeyUs = std::max(slowestKeyUs, t.nsecsElapsed() / 1000);
    QTest::qWait(40);
  }
  std::printf("typed %lld characters; the slowest key took %lld us\n",
              static_cast<long long>(shakespeare().size()), static_cast<long long>(slowestKeyUs));
  EXPECT_LT(slowestKeyUs, 100'000 * ::spillway::testing::kTimeScale);
  EXPECT_EQ(field->currentText(), shakespeare());
  EXPECT_EQ(started.size(), 0);  // no pause yet
  EXPECT_EQ(labelText(*page), "Reading dataset…");
  ASSERT_TRUE(previewed.wait(20000));
  QTest::qWait(400);
  EXPECT_EQ(started.size(), 1);
  EXPECT_EQ(previewed.size(), 1);
  ASSERT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
  // One document: "1 example", not "1 examples".
  EXPECT_TRUE(labelText(*page).startsWith("Format text · 1 example · "))
      << labelText(*page).toStdString();
}

TEST(NewRunPage, SequenceLength100000ReturnsAtOnceAndThePreviewComesLater) {
  SPILLWAY_REQUIRE_DATA();
  auto page = pageWithModel();
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  page->setDatasetPath(shakespeare());
  ASSERT_TRUE(previewed.wait(20000));
  ASSERT_TRUE(page->datasetPreview().ok);
  auto* seqLen = page->findChild<QSpinBox*>("seqLen");
  ASSERT_NE(seqLen, nullptr);

  EventLoopWatch watch;
  QElapsedTimer t;
  t.start();
  seqLen->setValue(100000);  // runs the page's slot, as a typed value does
  const qint64 slotUs = t.nsecsElapsed() / 1000;
  std::printf("seq 100000: %lld us in the slot\n", static_cast<long long>(slotUs));
  EXPECT_LT(slotUs, 100'000 * ::spillway::testing::kTimeScale);
  EXPECT_EQ(labelText(*page), "Reading dataset…");
  EXPECT_TRUE(page->datasetLoader()->busy());
  t.restart();
  ASSERT_TRUE(previewed.wait(30000));
  std::printf("seq 100000: preview shown %lld ms later; the event loop's longest gap %lld ms\n",
              static_cast<long long>(t.elapsed()), static_cast<long long>(watch.longestGapMs()));
  EXPECT_LT(watch.longestGapMs(), 100 * ::spillway::testing::kTimeScale);
  ASSERT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
  EXPECT_EQ(page->datasetPreview().seqLen, 100000);
  EXPECT_TRUE(labelText(*page).contains("sequences of up to 100000 tokens"))
      << labelText(*page).toStdString();
}

TEST(NewRunPage, A55MBFileReturnsAtOnceAndShowsTheSampleItCounted) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  const QString big = q(repeatedShakespeare(dir, 50));
  auto page = pageWithModel();
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  EventLoopWatch watch;
  QElapsedTimer t;
  t.start();
  page->setDatasetPath(big);  // as a paste into the field does
  const qint64 slotUs = t.nsecsElapsed() / 1000;
  std::printf("55.8 MB file: %lld us in the slot\n", static_cast<long long>(slotUs));
  EXPECT_LT(slotUs, 100'000 * ::spillway::testing::kTimeScale);
  t.restart();
  ASSERT_TRUE(previewed.wait(30000));
  std::printf(
      "55.8 MB file: preview shown %lld ms later (after the 300 ms pause); the event loop's "
      "longest gap %lld ms\n",
      static_cast<long long>(t.elapsed()), static_cast<long long>(watch.longestGapMs()));
  EXPECT_LT(watch.longestGapMs(), 100 * ::spillway::testing::kTimeScale);
  ASSERT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
  EXPECT_TRUE(page->datasetPreview().sampled);
  EXPECT_TRUE(labelText(*page).contains("counted in the first 1.00 MB of 55.8 MB; about 34."))
      << labelText(*page).toStdString();
}

TEST(NewRunPage, APathChangedDuringALoadShowsOnlyTheNewFile) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  const QString big = q(repeatedShakespeare(dir, 12));
  auto page = pageWithModel();
  QSignalSpy started(page->datasetLoader(), &DatasetPreviewLoader::started);
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  page->setDatasetPath(big);
  ASSERT_TRUE(started.wait(5000));  // the big file's load is running (it takes about 0.4 s)
  page->setDatasetPath(shakespeare());
  ASSERT_TRUE(previewed.wait(20000));
  QTest::qWait(600);  // were the stale answer delivered, it would be by now
  ASSERT_EQ(previewed.size(), 1);
  EXPECT_EQ(page->datasetPreview().fileBytes, 1115394);
  EXPECT_EQ(page->datasetLoader()->startedCount(), 2);
  EXPECT_EQ(page->datasetLoader()->droppedCount(), 1);
}

TEST(NewRunPage, BinaryFileShowsItsErrorInRed) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  auto page = pageWithModel();
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  page->setDatasetPath(q(binaryFile(dir)));
  ASSERT_TRUE(previewed.wait(20000));
  EXPECT_FALSE(page->datasetPreview().ok);
  EXPECT_TRUE(labelText(*page).startsWith("<span style=\"color:#d32f2f\">"))
      << labelText(*page).toStdString();
  EXPECT_TRUE(labelText(*page).contains("is not a text file: byte 8 is NUL"));
}

}  // namespace
}  // namespace spillway::ui

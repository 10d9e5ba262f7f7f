// Try it (issue 13 point 4) with the real worker: a run trained by spillway-worker, opened from
// History's Try it button; the base and the fine-tuned model answer the same prompt side by side
// (what `spillway-worker generate` gives for each), in worker processes while the event loop runs
// on; chat format for chat data; the latest checkpoint when the run has no export; Stop; a
// worker's error shown on its side; Export writes the chosen folder and says where it went.
#include <gtest/gtest.h>
#include <time.h>

#include <QApplication>
#include <QCheckBox>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QTest>
#include <QTimer>
#include <QUrl>
#include <filesystem>
#include <fstream>

#include "DialogFolder.h"
#include "HistoryPage.h"
#include "MainWindow.h"
#include "RunHistoryModel.h"
#include "TryItPage.h"
#include "event-loop-watch.h"
#include "history-wait.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::data_path;
using spillway::testing::TempDir;

// CPU time this thread has used, in ms.
double threadCpuMs() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

// `spillway-worker train JOB` run to its end: success when it finished within 300 s with exit 0;
// a failure says which, with the worker's stderr.
::testing::AssertionResult trainJob(const std::string& job) {
  QProcess worker;
  worker.start(SPILLWAY_WORKER_BINARY, {"train", q(job)});
  if (!worker.waitForFinished(300000))
    return ::testing::AssertionFailure() << "the worker did not finish " << job << " within 300 s";
  if (worker.exitCode() != 0)
    return ::testing::AssertionFailure() << "the worker exited " << worker.exitCode() << ": "
                                         << worker.readAllStandardError().toStdString();
  return ::testing::AssertionSuccess();
}

// Trains `model` on `data` for a few steps with the real worker; the run goes into `tmp`'s
// runs.db. Returns the run folder.
std::string train(const TempDir& tmp, const std::string& name, const std::string& model,
                  const std::string& data) {
  const std::string runDir = tmp.path() + "/runs/" + name;
  const std::string job = tmp.path() + "/" + name + ".json";
  std::ofstream(job)
      << R"({"name": ")" << name << R"(", "model": {"path": ")" << model
      << R"("}, "data": {"train": ")" << data
      << R"(", "seq_len": 48}, "train": {"steps": 6, "micro_batch_size": 2, "lr": 0.01,
                     "checkpoint_every": 3}, "output": {"run_dir": ")"
      << runDir << R"(", "db": ")" << tmp.path() << R"(/runs.db"}})";
  EXPECT_TRUE(trainJob(job));
  return runDir;
}

// What the worker's own command line answers.
QString cliCompletion(const QStringList& args) {
  QProcess worker;
  worker.start(SPILLWAY_WORKER_BINARY, QStringList{"generate"} + args + QStringList{"--json"});
  EXPECT_TRUE(worker.waitForFinished(120000));
  EXPECT_EQ(worker.exitCode(), 0) << worker.readAllStandardOutput().toStdString();
  const QByteArray line = worker.readAllStandardOutput().trimmed().split('\n').last();
  return QJsonDocument::fromJson(line).object()["completion"].toString();
}

QPushButton* buttonOf(QWidget* page, const QString& text) {
  for (QPushButton* b : page->findChildren<QPushButton*>())
    if (b->text() == text) return b;
  return nullptr;
}

class TryIt : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!spillway::testing::have_data()) GTEST_SKIP() << "no test data";
    if (!QFileInfo(SPILLWAY_WORKER_BINARY).isExecutable()) GTEST_SKIP() << "no worker binary";
    qputenv("SPILLWAY_WORKER", SPILLWAY_WORKER_BINARY);
  }
  TempDir tmp_;
};

TEST_F(TryIt, BaseAndFineTunedSideBySideFromHistoryInTheWorker) {
  const std::string stories = data_path("models/stories260K");
  const std::string run =
      train(tmp_, "shakespeare", stories, data_path("datasets/tinyshakespeare/input.txt"));
  MainWindow window(q(tmp_.path() + "/runs.db"));
  window.resize(1280, 720);
  window.show();
  window.showPage(MainWindow::kHistory);
  window.historyModel()->refresh();
  ASSERT_TRUE(waitForHistory(window.historyModel()));
  HistoryPage* history = window.historyPage();
  ASSERT_EQ(window.historyModel()->rowCount(), 1);
  history->table()->selectRow(0);
  history->table()->setCurrentIndex(history->table()->model()->index(0, 0));
  QTest::mouseClick(buttonOf(history, "Try it"), Qt::LeftButton);
  TryItPage* page = window.tryItPage();
  ASSERT_TRUE(page->isVisible());
  // The page fits the window at 1280 x 720 (less a panel and a title bar), as the others do.
  EXPECT_LE(window.minimumSizeHint().width(), 1280);
  EXPECT_LE(window.minimumSizeHint().height(), 658);
  for (QWidget* w : page->findChildren<QPushButton*>())
    EXPECT_EQ(w->visibleRegion().boundingRect().size(), w->size()) << w->objectName().toStdString();
  const TryItPage::Models& m = page->models();
  ASSERT_EQ(m.error, "");
  EXPECT_EQ(m.tuned, q(run) + "/export");
  EXPECT_FALSE(m.tunedIsCheckpoint);
  EXPECT_EQ(QFileInfo(m.baseModel).canonicalFilePath().toStdString(),
            fs::canonical(stories).string());
  EXPECT_FALSE(page->findChild<QCheckBox*>("tryChat")->isChecked());  // plain text, no template
  EXPECT_TRUE(
      page->findChild<QLabel*>("tryModels")->text().contains("Fine-tuned: " + q(run) + "/export"));

  page->setPrompt("ROMEO:");
  QSignalSpy done(page, &TryItPage::generated);
  EventLoopWatch watch;
  QElapsedTimer wall;
  wall.start();
  const double cpuBefore = threadCpuMs();
  QTest::mouseClick(page->findChild<QPushButton*>("tryGenerate"), Qt::LeftButton);
  EXPECT_TRUE(page->busy());
  EXPECT_TRUE(page->findChild<QPushButton*>("tryStop")->isEnabled());
  EXPECT_FALSE(page->findChild<QPushButton*>("tryGenerate")->isEnabled());
  ASSERT_TRUE(done.wait(120000));
  const double guiCpu = threadCpuMs() - cpuBefore;
  std::printf(
      "generate: %lld ms; the GUI thread used %.1f ms of CPU in that time; the event loop's "
      "longest "
      "gap %lld ms\nbase: %s\nfine-tuned: %s\n",
      static_cast<long long>(wall.elapsed()), guiCpu, static_cast<long long>(watch.longestGapMs()),
      page->baseText().toStdString().c_str(), page->tunedText().toStdString().c_str());
  // Printed, not asserted here: the whole window's other pages (Live's timer) share the thread and
  // on a loaded machine the gap measures the scheduler. The page alone is held to a bound below.
  (void)guiCpu;
  EXPECT_EQ(page->baseError(), "");
  EXPECT_EQ(page->tunedError(), "");
  // Each side is what the worker gives for its model: greedy, so the same text.
  EXPECT_EQ(page->baseText(), cliCompletion({"--model", m.baseModel, "--prompt", "ROMEO:"}));
  EXPECT_EQ(page->tunedText(), cliCompletion({"--model", m.tuned, "--prompt", "ROMEO:"}));
  EXPECT_FALSE(page->tunedText().isEmpty());
  EXPECT_TRUE(page->findChild<QLabel*>("tryTunedStatus")->text().endsWith("new tokens"));
  EXPECT_FALSE(page->busy());
  // Away and back: the same run, and the user's choice of Chat format, stay.
  page->findChild<QCheckBox*>("tryChat")->setChecked(true);
  window.showPage(MainWindow::kHistory);
  window.showPage(MainWindow::kTryIt);
  EXPECT_EQ(page->runId().toStdString(), window.historyModel()->run(0).info.id);
  EXPECT_TRUE(page->findChild<QCheckBox*>("tryChat")->isChecked());
}

TEST_F(TryIt, ChatDataIsPromptedAsAChatAndACheckpointServesWithoutAnExport) {
  const std::string run = train(tmp_, "alpaca", data_path("models/stories260K"),
                                data_path("datasets/alpaca/alpaca_en_demo.json"));
  fs::remove_all(run + "/export");  // a run stopped before its end has checkpoints only
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(tmp_.path() + "/runs.db")), "");
  ASSERT_TRUE(waitForHistory(&model));
  TryItPage page(&model);
  page.setRun(QString::fromStdString(model.run(0).info.id));
  const TryItPage::Models& m = page.models();
  ASSERT_EQ(m.error, "");
  EXPECT_TRUE(m.tunedIsCheckpoint);
  EXPECT_EQ(m.tuned, q(run) + "/checkpoints/step-000006");
  EXPECT_TRUE(page.findChild<QCheckBox*>("tryChat")->isChecked());
  page.setPrompt("Name three colours.");
  QSignalSpy done(&page, &TryItPage::generated);
  QElapsedTimer wall;
  wall.start();
  const double cpuBefore = threadCpuMs();
  ASSERT_TRUE(page.generate());
  ASSERT_TRUE(done.wait(120000));
  const double guiCpu = threadCpuMs() - cpuBefore;
  std::printf("chat generate: %lld ms; the GUI thread used %.1f ms of CPU in that time\n",
              static_cast<long long>(wall.elapsed()), guiCpu);
  // The models run in the workers: this thread only starts two processes and reads their answers.
  EXPECT_LT(guiCpu, 100 * ::spillway::testing::kTimeScale);
  EXPECT_EQ(page.tunedError(), "");
  EXPECT_EQ(page.baseError(), "");
  // stories260K has no chat template of its own: the family's, llama-2, as in training.
  EXPECT_TRUE(page.findChild<QLabel*>("tryTunedStatus")->text().endsWith("chat template llama-2"))
      << page.findChild<QLabel*>("tryTunedStatus")->text().toStdString();
  EXPECT_EQ(page.tunedText(), cliCompletion({"--model", m.tuned, "--tokenizer", m.tokenizer,
                                             "--prompt", "Name three colours.", "--chat", "auto"}));
}

TEST_F(TryIt, StopEndsBothSidesAndAWorkersErrorIsShownOnItsSide) {
  // A copy of the base model, so that it can go missing after training.
  const std::string base = tmp_.path() + "/base-model";
  fs::copy(data_path("models/stories260K"), base);
  train(tmp_, "gone", base, data_path("datasets/tinyshakespeare/input.txt"));
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(tmp_.path() + "/runs.db")), "");
  ASSERT_TRUE(waitForHistory(&model));
  TryItPage page(&model);
  page.setRun(QString::fromStdString(model.run(0).info.id));
  page.setPrompt("Once upon a time");
  QSignalSpy done(&page, &TryItPage::generated);

  page.findChild<QSpinBox*>("tryMaxTokens")->setValue(4000);  // long enough to be stopped
  ASSERT_TRUE(page.generate());
  QTest::qWait(300);
  QTest::mouseClick(page.findChild<QPushButton*>("tryStop"), Qt::LeftButton);
  ASSERT_TRUE(done.wait(10000));
  EXPECT_FALSE(page.busy());
  EXPECT_EQ(page.baseError(), "Stopped.");
  EXPECT_EQ(page.tunedError(), "Stopped.");
  EXPECT_TRUE(page.findChild<QPushButton*>("tryGenerate")->isEnabled());

  fs::remove(base + "/model.safetensors");
  page.findChild<QSpinBox*>("tryMaxTokens")->setValue(8);
  ASSERT_TRUE(page.generate());
  ASSERT_TRUE(done.wait(120000));
  std::printf("base side said: %s\n", page.baseError().toStdString().c_str());
  EXPECT_TRUE(page.baseError().contains("model.safetensors")) << page.baseError().toStdString();
  EXPECT_TRUE(page.findChild<QLabel*>("tryBaseStatus")->text().contains("color:#d32f2f"));
  EXPECT_EQ(page.tunedError(), "");  // the export does not need the base folder
  EXPECT_FALSE(page.tunedText().isEmpty());
}

TEST_F(TryIt, ExportWritesTheChosenFolderAndSaysWhereItWent) {
  const std::string run = train(tmp_, "export", data_path("models/stories260K"),
                                data_path("datasets/tinyshakespeare/input.txt"));
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(tmp_.path() + "/runs.db")), "");
  ASSERT_TRUE(waitForHistory(&model));
  TryItPage page(&model);
  page.show();
  page.setRun(QString::fromStdString(model.run(0).info.id));
  // A new folder's name, in a folder that exists: the dialog takes it (it used to say "Directory
  // not found"), and the export makes it.
  const QString out = q(tmp_.path() + "/my exports/shakespeare");
  ASSERT_TRUE(QDir().mkpath(q(tmp_.path() + "/my exports")));
  QSettings().remove("export/lastFolder");
  QSignalSpy exported(&page, &TryItPage::exported);
  // Export…, and the folder chosen in its dialog as a person would. It opens in the home folder,
  // not the app's working directory.
  bool answered = false;
  QString openedIn;
  QTimer::singleShot(300, [&] {
    auto* dialog = qobject_cast<QFileDialog*>(QApplication::activeModalWidget());
    if (!dialog) return;
    answered = true;
    openedIn = dialog->directory().absolutePath();
    dialog->findChild<QLineEdit*>("fileNameEdit")->setText(out);
    QMetaObject::invokeMethod(dialog, "accept", Qt::QueuedConnection);
  });
  QTest::mouseClick(page.findChild<QPushButton*>("tryExport"), Qt::LeftButton);
  ASSERT_TRUE(answered) << "no folder dialog came";
  EXPECT_EQ(openedIn, QDir(DialogFolder::home()).absolutePath());  // "/" where $HOME is no folder
  EXPECT_FALSE(page.findChild<QPushButton*>("tryExport")->isEnabled());  // one at a time
  ASSERT_TRUE(exported.wait(120000));
  EXPECT_TRUE(exported.at(0).at(0).toBool()) << exported.at(0).at(1).toString().toStdString();
  EXPECT_EQ(page.exportMessage().toStdString(),
            ("Exported step 6 to " + out + " · open folder").toStdString());
  auto* status = page.findChild<QLabel*>("tryExportStatus");
  EXPECT_TRUE(status->isVisible());
  EXPECT_TRUE(status->text().contains(QUrl::fromLocalFile(out).toString(QUrl::FullyEncoded)));
  for (const char* f : {"config.json", "model.safetensors"})
    EXPECT_TRUE(QFileInfo::exists(out + "/" + f)) << f;
  EXPECT_TRUE(QFileInfo::exists(out + "/tokenizer.json") ||
              QFileInfo::exists(out + "/tokenizer.model"));
  // The exported folder is a model the worker generates from.
  EXPECT_FALSE(
      cliCompletion({"--model", out, "--prompt", "ROMEO:", "--max-new-tokens", "8"}).isEmpty());

  // The next Export… opens where the last one went.
  openedIn.clear();
  QTimer::singleShot(300, [&] {
    if (auto* dialog = qobject_cast<QFileDialog*>(QApplication::activeModalWidget())) {
      openedIn = dialog->directory().absolutePath();
      QMetaObject::invokeMethod(dialog, "reject", Qt::QueuedConnection);
    }
  });
  QTest::mouseClick(page.findChild<QPushButton*>("tryExport"), Qt::LeftButton);
  EXPECT_EQ(openedIn, q(tmp_.path() + "/my exports"));
  EXPECT_EQ(exported.size(), 1);  // cancelled: nothing exported

  // A folder with the user's files (a Downloads folder): refused by the worker, shown in red,
  // and every file of it still there.
  const QString downloads = q(tmp_.path() + "/Downloads");
  ASSERT_TRUE(QDir().mkpath(downloads + "/photos"));
  std::ofstream((downloads + "/notes.txt").toStdString()) << "mine";
  exported.clear();
  ASSERT_TRUE(page.exportTo(downloads));
  ASSERT_TRUE(exported.wait(120000));
  EXPECT_FALSE(exported.at(0).at(0).toBool());
  EXPECT_TRUE(page.exportMessage().startsWith(
      "Export failed: export to " + downloads +
      ": the folder holds files Spillway did not write (notes.txt, photos); an export replaces "
      "its whole folder, so nothing was written: name a new or empty folder (e.g. " +
      downloads + "/model)"))
      << page.exportMessage().toStdString();
  EXPECT_TRUE(page.findChild<QLabel*>("tryExportStatus")->text().contains("color:#d32f2f"));
  EXPECT_TRUE(QFileInfo::exists(downloads + "/notes.txt"));
  EXPECT_TRUE(QFileInfo(downloads + "/photos").isDir());
  EXPECT_FALSE(QFileInfo::exists(downloads + "/model.safetensors"));

  // A folder that cannot be written: the worker's reason, in red, and nothing claimed.
  const QString blocked = q(tmp_.path() + "/a file");
  std::ofstream(blocked.toStdString()) << "x";
  exported.clear();
  ASSERT_TRUE(page.exportTo(blocked + "/model"));
  ASSERT_TRUE(exported.wait(120000));
  EXPECT_FALSE(exported.at(0).at(0).toBool());
  std::printf("export into a file said: %s\n", page.exportMessage().toStdString().c_str());
  EXPECT_TRUE(page.exportMessage().startsWith("Export failed: "))
      << page.exportMessage().toStdString();
  EXPECT_TRUE(status->text().contains("color:#d32f2f"));
  EXPECT_TRUE(page.findChild<QPushButton*>("tryExport")->isEnabled());
}

// A run of a model made from model.init (a preset, random weights) has no base model, but what it
// trained is a model: the fine-tuned side answers from the latest checkpoint with the job's
// tokenizer, as `generate --model CHECKPOINT --tokenizer PATH` does, the base side says in one line
// why it stays empty, and Export writes the checkpoint. It offered neither Generate nor Export.
// Export as GGUF: the format choice passes --format gguf --type to the worker, off the window
// thread, and the page says which file it wrote.
TEST_F(TryIt, ExportAsGgufWritesModelGgufAndAModelfile) {
  const std::string run = train(tmp_, "gguf", data_path("models/stories260K"),
                                data_path("datasets/tinyshakespeare/input.txt"));
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(tmp_.path() + "/runs.db")), "");
  ASSERT_TRUE(waitForHistory(&model));
  TryItPage page(&model);
  page.show();
  page.setRun(QString::fromStdString(model.run(0).info.id));
  EXPECT_FALSE(page.setExportFormat("gguf-q4"));
  ASSERT_TRUE(page.setExportFormat("gguf-q8_0"));
  EXPECT_EQ(page.findChild<QComboBox*>("tryExportFormat")->currentText(), "GGUF Q8_0");
  QSignalSpy exported(&page, &TryItPage::exported);
  const QString out = q(tmp_.path() + "/gguf out");
  ASSERT_TRUE(page.exportTo(out));
  EXPECT_FALSE(page.findChild<QPushButton*>("tryExport")->isEnabled());  // one at a time
  ASSERT_TRUE(exported.wait(120000));
  ASSERT_TRUE(exported.at(0).at(0).toBool()) << exported.at(0).at(1).toString().toStdString();
  EXPECT_TRUE(page.exportMessage().startsWith("Exported step 6 to " + out +
                                              "/model.gguf (GGUF Q8_0, with an Ollama Modelfile); "
                                              "note: 5 tensors"))
      << page.exportMessage().toStdString();
  EXPECT_TRUE(QFileInfo::exists(out + "/model.gguf"));
  EXPECT_TRUE(QFileInfo::exists(out + "/Modelfile"));
  EXPECT_FALSE(QFileInfo::exists(out + "/model.safetensors"));
  // The choice is the next page's (a new session) too.
  TryItPage next(&model);
  EXPECT_EQ(next.findChild<QComboBox*>("tryExportFormat")->currentData().toString(), "gguf-q8_0");
  ASSERT_TRUE(next.setExportFormat("hf"));
}

TEST_F(TryIt, ARunFromModelInitAnswersOnTheFineTunedSideAndExports) {
  const std::string stories = data_path("models/stories260K");  // llama-tiny's shape and vocabulary
  const std::string runDir = tmp_.path() + "/runs/init";
  const std::string job = tmp_.path() + "/init.json";
  std::ofstream(job)
      << R"({"name": "from init", "model": {"init": "llama-tiny", "seed": 3, "tokenizer": ")"
      << stories << R"("}, "data": {"train": ")" << data_path("datasets/tinyshakespeare/input.txt")
      << R"(", "seq_len": 32}, "train": {"steps": 4, "micro_batch_size": 2, "lr": 0.01,
                     "checkpoint_every": 2}, "output": {"run_dir": ")"
      << runDir << R"(", "db": ")" << tmp_.path() << R"(/runs.db"}})";
  ASSERT_TRUE(trainJob(job));

  // The finished run exported itself; without that export (a run stopped early has none) the
  // fine-tuned side is the latest checkpoint, which has no tokenizer of its own: the job's is used.
  ASSERT_TRUE(QFileInfo::exists(q(runDir + "/export/config.json")));
  fs::remove_all(runDir + "/export");

  RunHistoryModel model;
  ASSERT_EQ(model.open(q(tmp_.path() + "/runs.db")), "");
  ASSERT_TRUE(waitForHistory(&model));
  TryItPage page(&model);
  page.show();
  page.setRun(QString::fromStdString(model.run(0).info.id));
  const TryItPage::Models& m = page.models();
  EXPECT_EQ(m.error, "");
  EXPECT_EQ(m.noBase, "No base model: this run started from random weights (model.init).");
  EXPECT_TRUE(m.tunedIsCheckpoint);
  EXPECT_EQ(QFileInfo(m.tuned).fileName().toStdString(), "step-000004");
  EXPECT_EQ(m.tokenizer, q(stories));
  EXPECT_EQ(page.baseStatus(), m.noBase);  // before Generate too
  EXPECT_TRUE(page.findChild<QPushButton*>("tryExport")->isEnabled());

  page.setPrompt("ROMEO:");
  page.findChild<QSpinBox*>("tryMaxTokens")->setValue(6);
  page.findChild<QCheckBox*>("tryChat")->setChecked(false);  // plain text data: a continuation
  page.findChild<QDoubleSpinBox*>("tryTemperature")->setValue(0);  // greedy: the CLI's answer
  QSignalSpy generated(&page, &TryItPage::generated);
  ASSERT_TRUE(page.generate());
  ASSERT_TRUE(generated.wait(120000));
  EXPECT_EQ(page.tunedError(), "");
  EXPECT_EQ(page.baseError(), "");
  EXPECT_EQ(page.baseText(), "");
  EXPECT_EQ(page.baseStatus(), m.noBase);
  EXPECT_FALSE(page.tunedText().isEmpty());
  EXPECT_EQ(page.tunedText(),
            cliCompletion({"--model", m.tuned, "--tokenizer", q(stories), "--prompt",
                           "ROMEO:", "--max-new-tokens", "6", "--temperature", "0"}));

  QSignalSpy exported(&page, &TryItPage::exported);
  const QString out = q(tmp_.path() + "/exported init");
  ASSERT_TRUE(page.exportTo(out));
  ASSERT_TRUE(exported.wait(120000));
  EXPECT_TRUE(exported.at(0).at(0).toBool()) << exported.at(0).at(1).toString().toStdString();
  EXPECT_TRUE(QFileInfo::exists(out + "/config.json"));
  EXPECT_TRUE(QFileInfo::exists(out + "/model.safetensors"));
}

}  // namespace
}  // namespace spillway::ui

// The app end to end: it launches a real worker run on stories260K (CPU backend), the Live page
// receives samples and steps, closing the GUI mid-run does not stop the run, a new window
// re-attaches to it live, and the run appears in History.
#include <gtest/gtest.h>
#include <signal.h>

#include <QFileInfo>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <fstream>

#include "HistoryPage.h"
#include "LivePage.h"
#include "MainWindow.h"
#include "NewRunPage.h"
#include "PlanView.h"
#include "RunHistoryModel.h"
#include "WorkerClient.h"
#include "test-data.h"

namespace spillway::ui {
namespace {

bool waitFor(const std::function<bool()>& cond, int ms) {
  for (int waited = 0; waited < ms; waited += 100) {
    if (cond()) return true;
    QTest::qWait(100);
  }
  return cond();
}

#define REQUIRE_WORKER()                                 \
  if (!QFileInfo(SPILLWAY_WORKER_BINARY).isExecutable()) \
  GTEST_SKIP() << "no worker binary at " SPILLWAY_WORKER_BINARY

// Run history and settings under `tmp`, and the worker this build made.
void use_own_dirs_and_worker(const spillway::testing::TempDir& tmp) {
  qputenv("XDG_DATA_HOME", QByteArray::fromStdString(tmp.path() + "/xdg"));
  qputenv("XDG_CONFIG_HOME", QByteArray::fromStdString(tmp.path() + "/config"));
  qputenv("SPILLWAY_WORKER", SPILLWAY_WORKER_BINARY);
}

TEST(EndToEnd, PlanFromTheWorker) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  spillway::testing::TempDir tmp;
  use_own_dirs_and_worker(tmp);
  NewRunPage page;
  page.setModelPath(QString::fromStdString(spillway::testing::data_path("models/stories260K")));
  page.setDatasetPath(
      QString::fromStdString(spillway::testing::data_path("datasets/tinyshakespeare/input.txt")));
  QSignalSpy spy(&page, &NewRunPage::planned);
  page.plan();
  EXPECT_TRUE(page.planning());  // in the background: the window stays responsive
  ASSERT_TRUE(spy.wait(60000));
  const PlanResult& plan = page.planView()->plan();
  ASSERT_TRUE(plan.ok) << plan.error.toStdString();
  EXPECT_TRUE(plan.fits) << plan.reason.toStdString();
  EXPECT_EQ(plan.tiers.size(), 3);
  EXPECT_GT(plan.tokensPerSecond, 0);
  EXPECT_TRUE(page.planView()->tierText(1).startsWith("needs"))
      << page.planView()->tierText(1).toStdString();
  // The worker's suggestion: on the CPU backend the job's own micro-batch and accumulation.
  ASSERT_TRUE(plan.suggestion.present);
  EXPECT_TRUE(plan.suggestion.fits) << plan.suggestion.why.toStdString();
  EXPECT_GT(plan.suggestion.microBatchSize, 0);
  if (plan.suggestion.why.contains("CPU backend")) {
    EXPECT_TRUE(plan.suggestion.sameAsJob);
    EXPECT_EQ(plan.suggestion.microBatchSize, page.settings().microBatchSize);
    EXPECT_EQ(plan.suggestion.gradAccum, page.settings().gradAccum);
  }
  EXPECT_TRUE(page.planView()->suggestionText().startsWith("Suggested: micro-batch "))
      << page.planView()->suggestionText().toStdString();
}

// Measure: the worker trains the job's first steps in a throwaway run and the plan view shows
// them against the plan; History does not list the probe.
TEST(EndToEnd, MeasureFromTheWorker) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  spillway::testing::TempDir tmp;
  use_own_dirs_and_worker(tmp);
  NewRunPage page;
  page.setModelPath(QString::fromStdString(spillway::testing::data_path("models/stories260K")));
  page.setDatasetPath(
      QString::fromStdString(spillway::testing::data_path("datasets/tinyshakespeare/input.txt")));
  QSignalSpy spy(&page, &NewRunPage::planned);
  page.measure();
  EXPECT_TRUE(page.planning());
  ASSERT_TRUE(spy.wait(120000));
  const PlanResult& plan = page.planView()->plan();
  ASSERT_TRUE(plan.ok) << plan.error.toStdString();
  ASSERT_FALSE(plan.measured.isEmpty());
  EXPECT_TRUE(plan.measured[0].startsWith("step ")) << plan.measured[0].toStdString();
  EXPECT_TRUE(plan.measured.join('\n').contains("peak DRAM")) << plan.measured.join('\n').toStdString();
}

TEST(EndToEnd, LaunchWatchCloseReattachHistory) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  spillway::testing::TempDir tmp;
  use_own_dirs_and_worker(tmp);

  auto window = std::make_unique<MainWindow>();
  JobSettings s;
  s.name = "e2e stories260K";
  s.modelPath = QString::fromStdString(spillway::testing::data_path("models/stories260K"));
  s.trainPath =
      QString::fromStdString(spillway::testing::data_path("datasets/tinyshakespeare/input.txt"));
  s.steps = 100000;  // stopped by the test
  s.seqLen = 64;
  s.microBatchSize = 4;
  s.lr = 1e-3;
  s.evalEvery = 0;
  s.checkpointEvery = 0;
  s.backend = "cpu";
  QSignalSpy previewed(window->newRunPage(), &NewRunPage::datasetPreviewed);
  window->newRunPage()->setSettings(s);
  ASSERT_TRUE(window->newRunPage()->modelInfo().ok)
      << window->newRunPage()->modelInfo().error.toStdString();
  ASSERT_TRUE(previewed.wait(30000));  // the preview loads off the GUI thread
  ASSERT_TRUE(window->newRunPage()->datasetPreview().ok)
      << window->newRunPage()->datasetPreview().error.toStdString();
  QString runDir;
  ASSERT_TRUE(window->newRunPage()->launch(&runDir));
  ASSERT_FALSE(runDir.isEmpty());

  LivePage* live = window->livePage();
  ASSERT_TRUE(waitFor(
      [&] { return live->series().loss.size() >= 3 && !live->series().tierBytes.isEmpty(); },
      60000))
      << "no steps or samples from " << runDir.toStdString();
  const qint64 pid = live->pid();
  ASSERT_TRUE(WorkerClient::alive(pid));

  // Close the GUI mid-run: the worker keeps going.
  window->close();
  window.reset();
  QTest::qWait(1500);
  ASSERT_TRUE(WorkerClient::alive(pid));

  // A new window finds the run and shows it live again.
  auto again = std::make_unique<MainWindow>();
  EXPECT_EQ(again->livePage()->runDir(), runDir);
  const qint64 before = again->livePage()->series().lastStep;
  ASSERT_TRUE(waitFor([&] { return again->livePage()->series().lastStep > before + 2; }, 30000));

  // Pause suspends the worker; Stop on a paused run resumes it so that it checkpoints and stops,
  // and the run is in History as stopped.
  LivePage* live2 = again->livePage();
  live2->pauseOrResume();
  ASSERT_TRUE(waitFor([&] { return WorkerClient::suspended(pid); }, 5000));
  EXPECT_TRUE(live2->paused());
  live2->stop();
  ASSERT_TRUE(waitFor([&] { return !WorkerClient::alive(pid); }, 30000));
  again->historyModel()->refresh();
  bool found = false;
  for (int r = 0; r < again->historyModel()->rowCount(); ++r) {
    const RunInfo& info = again->historyModel()->run(r).info;
    if (QString::fromStdString(info.run_dir) != runDir) continue;
    found = true;
    EXPECT_EQ(info.status, RunStatus::kStopped);
    EXPECT_GT(info.final_step.value_or(0), 3);
  }
  EXPECT_TRUE(found);
}

// A job the worker refuses once it has started (issue 13: a read-only SSD folder gave nothing but
// a worker.err file): Live says failed with the worker's own message, in its status line and a
// dialog, its controls go off, and History lists the run as failed with that message.
TEST(EndToEnd, ARunThatFailsAtStartIsShownWithTheWorkersMessageAndInHistory) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  spillway::testing::TempDir tmp;
  use_own_dirs_and_worker(tmp);
  // The SSD folder is a file: the worker cannot make its state folder there (as root, a
  // read-only mode would not stop it; a file does).
  const std::string ssd = tmp.path() + "/not-a-folder";
  std::ofstream(ssd) << "x";

  MainWindow window;
  JobSettings s;
  s.name = "e2e fails at start";
  s.modelPath = QString::fromStdString(spillway::testing::data_path("models/stories260K"));
  s.trainPath =
      QString::fromStdString(spillway::testing::data_path("datasets/tinyshakespeare/input.txt"));
  s.steps = 10;
  s.seqLen = 64;
  s.backend = "cpu";
  s.optimizerTier = "ssd";
  s.ssdDir = QString::fromStdString(ssd);
  QSignalSpy previewed(window.newRunPage(), &NewRunPage::datasetPreviewed);
  window.newRunPage()->setSettings(s);
  ASSERT_TRUE(previewed.wait(30000));
  QString runDir;
  ASSERT_TRUE(window.newRunPage()->launch(&runDir));
  LivePage* live = window.livePage();
  ASSERT_TRUE(waitFor([&] { return live->phase() == LivePage::Phase::kFailed; }, 60000))
      << LivePage::phaseName(live->phase()).toStdString();
  const QString message = live->endMessage();
  EXPECT_TRUE(message.contains(QString::fromStdString(ssd))) << message.toStdString();
  EXPECT_TRUE(live->statusText().startsWith("failed · ")) << live->statusText().toStdString();
  auto* dialog = live->findChild<QMessageBox*>("runEndedDialog");
  ASSERT_NE(dialog, nullptr);
  EXPECT_TRUE(dialog->isVisible());
  EXPECT_TRUE(dialog->text().endsWith(message)) << dialog->text().toStdString();
  EXPECT_EQ(live->findChildren<QPushButton*>(Qt::FindDirectChildrenOnly).size(), 3);
  for (QPushButton* b : live->findChildren<QPushButton*>(Qt::FindDirectChildrenOnly))
    EXPECT_FALSE(b->isEnabled()) << b->text().toStdString();  // Pause, Save checkpoint, Stop
  EXPECT_FALSE(live->pauseAction()->isEnabled());
  EXPECT_FALSE(live->stopAction()->isEnabled());

  // History: the worker recorded the run as failed, with the same message.
  bool found = false;
  for (int r = 0; r < window.historyModel()->rowCount(); ++r) {
    const RunInfo& info = window.historyModel()->run(r).info;
    if (info.name != "e2e fails at start") continue;
    found = true;
    EXPECT_EQ(info.status, RunStatus::kFailed);
    EXPECT_TRUE(QString::fromStdString(info.error_message).contains(message)) << info.error_message;
    EXPECT_EQ(QString::fromStdString(info.run_dir), runDir);
    const int row = window.historyModel()->rowOfRun(QString::fromStdString(info.id));
    EXPECT_EQ(window.historyModel()->data(window.historyModel()->index(row, RunHistoryModel::kStatus),
                                          Qt::DisplayRole),
              "failed");
  }
  EXPECT_TRUE(found);
  dialog->accept();
}

}  // namespace
}  // namespace spillway::ui

// Issue 13 point 1's test: the real window (MainWindow at 1280 x 720, New run page) never blocks
// its event loop for more than 100 ms while the user types the path of a 55 MB dataset key by
// key into the dataset field (which completes to a recent dataset on every key, as in the issue),
// and while the user picks one through Browse… and its file dialog, until the preview is shown.
// Measured with a 5 ms timer on the event loop, from the first key to the preview.
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QElapsedTimer>
#include <QFileDialog>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QTimer>
#include <filesystem>
#include <fstream>

#include "DatasetPreviewLoader.h"
#include "LivePage.h"
#include "MainWindow.h"
#include "ModelPicker.h"
#include "NewRunPage.h"
#include "RunEditQueue.h"
#include "RunHistoryModel.h"
#include "event-loop-watch.h"
#include "history-wait.h"
#include "history/process-liveness.h"
#include "history/run-store.h"
#include "history/sqlite-util.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
using spillway::testing::data_path;
using spillway::testing::TempDir;

// 50 times tinyshakespeare: 55.8 MB, the paste.
std::string bigDataset(const TempDir& dir, const std::string& name) {
  std::ifstream in(data_path("datasets/tinyshakespeare/input.txt"), std::ios::binary);
  const std::string text((std::istreambuf_iterator<char>(in)), {});
  const std::string path = dir.file(name);
  std::ofstream out(path, std::ios::binary);
  for (int i = 0; i < 50; ++i) out << text;
  return path;
}

QPushButton* browseOf(QWidget* box) {
  for (QPushButton* b : box->findChildren<QPushButton*>())
    if (b->text() == "Browse…") return b;
  return nullptr;
}

TEST(WindowResponsive, TypingOrPickingA55MBDatasetNeverBlocksTheWindow) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  const QString typed = q(bigDataset(tmp, "typed-55MB.txt"));
  const QString picked = q(bigDataset(tmp, "picked-55MB.txt"));
  MainWindow window(q(tmp.path() + "/runs.db"));
  window.resize(1280, 720);
  window.showPage(MainWindow::kNewRun);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  NewRunPage* page = window.newRunPage();
  page->setModelPath(q(data_path("models/stories260K")));
  ASSERT_TRUE(page->modelInfo().ok);
  auto* field = page->findChild<QComboBox*>("datasetPath");
  ASSERT_NE(field, nullptr);
  field->addItem(typed);  // a recent dataset: the field completes to it while it is typed
  field->setCurrentText(QString());
  QSignalSpy previewed(page, &NewRunPage::datasetPreviewed);
  QTest::qWait(500);  // the empty field's preview request settles
  previewed.clear();

  // Typing: a key every 30 ms, through the window's event queue.
  {
    const int loadsBefore = page->datasetLoader()->startedCount();
    EventLoopWatch watch;
    field->lineEdit()->setFocus();
    for (const QChar c : typed) {
      QTest::keyClick(field->lineEdit(), c.toLatin1());
      QTest::qWait(30);
    }
    EXPECT_EQ(field->currentText(), typed);
    ASSERT_TRUE(previewed.wait(30000));
    const qint64 gap = watch.longestGapMs();
    std::printf(
        "typed a %lld-character path to a 55.8 MB file: the event loop's longest gap %lld ms\n",
        static_cast<long long>(typed.size()), static_cast<long long>(gap));
    EXPECT_LT(gap, 100 * ::spillway::testing::kTimeScale);
    ASSERT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
    EXPECT_TRUE(page->datasetPreview().sampled);
    EXPECT_EQ(page->datasetLoader()->startedCount(), loadsBefore + 1);  // one load, after the pause
  }

  // Picking: Browse…, the file dialog, the file chosen and accepted.
  {
    previewed.clear();
    QPushButton* browse = browseOf(page->findChild<QLabel*>("datasetLabel")->parentWidget());
    ASSERT_NE(browse, nullptr);
    EventLoopWatch watch;
    bool answered = false;
    QTimer::singleShot(200, [&] {
      auto* dialog = qobject_cast<QFileDialog*>(QApplication::activeModalWidget());
      if (!dialog) return;
      answered = true;
      dialog->findChild<QLineEdit*>("fileNameEdit")->setText(picked);
      QMetaObject::invokeMethod(dialog, "accept", Qt::QueuedConnection);
    });
    QTest::mouseClick(browse, Qt::LeftButton);
    ASSERT_TRUE(answered) << "no file dialog came";
    EXPECT_EQ(field->currentText(), picked);
    ASSERT_TRUE(previewed.wait(30000));
    const qint64 gap = watch.longestGapMs();
    std::printf("picked a 55.8 MB file through Browse…: the event loop's longest gap %lld ms\n",
                static_cast<long long>(gap));
    EXPECT_LT(gap, 100 * ::spillway::testing::kTimeScale);
    ASSERT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
    EXPECT_TRUE(page->findChild<QLabel*>("datasetLabel")->text().contains("of 55.8 MB"))
        << page->findChild<QLabel*>("datasetLabel")->text().toStdString();
  }
}

}  // namespace
}  // namespace spillway::ui

namespace spillway::ui {
namespace {

// History reads the run store on a pool thread. A worker holds runs.db's write lock for as long as
// a transaction takes, and marking the run of a worker that is gone is a write that waits for it
// (up to the store's 5 s busy timeout): opening History's store, showing History and reattaching
// at start all did that wait on the window's thread. With the lock held, the window keeps
// answering, History lists the runs (a WAL read does not wait; the read gives up marking after
// 1 s), an edit says the store is locked after 1 s, and the gone worker's run is marked once the
// lock is free.
TEST(WindowResponsive, HistoryWhileAWorkerHoldsTheWriteLockNeverBlocksTheWindow) {
  TempDir tmp;
  const std::string db = tmp.file("runs.db");
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    RunInfo gone;
    gone.name = "worker gone";
    gone.status = RunStatus::kRunning;
    gone.pid = QCoreApplication::applicationPid();  // this process, but started at another time
    gone.pid_start_ticks = 1;
    gone.boot_id = current_boot_id();
    gone.host = current_host_name();
    ASSERT_TRUE((*store)->create_run(gone).ok());
  }
  auto writer = SqliteDb::open(db);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->exec("BEGIN IMMEDIATE").ok());  // as a worker's transaction holds it

  EventLoopWatch watch;
  QElapsedTimer clock;
  clock.start();
  MainWindow window(q(db));
  QSignalSpy reattached(&window, &MainWindow::reattached);  // the store is read on a pool thread
  window.resize(1280, 720);
  window.show();
  window.showPage(MainWindow::kHistory);
  RunHistoryModel* model = window.historyModel();
  QTest::qWait(200);
  ASSERT_TRUE(waitForHistory(model));
  ASSERT_TRUE(!reattached.isEmpty() || reattached.wait(5000));
  const qint64 gap = watch.longestGapMs();
  std::printf(
      "[ measure  ] History with runs.db write-locked: rows after %lld ms, longest event-loop gap "
      "%lld ms\n",
      static_cast<long long>(clock.elapsed()), static_cast<long long>(gap));
  // The wait was 5,000 ms. A process whose first window this is spends about 0.4 s of the gap
  // setting up fonts and styles (25-70 ms among the other tests).
  EXPECT_LT(gap, 2000 * ::spillway::testing::kTimeScale);
  ASSERT_EQ(model->rowCount(), 1);
  EXPECT_EQ(model->run(0).info.status, RunStatus::kRunning);  // not marked: the lock was held
  EXPECT_TRUE(window.livePage()->runDir().isEmpty());         // a gone worker is not reattached
  EXPECT_EQ(reattached[0][0].toString(), "");

  // An edit is a write on the window's thread: it says the store is locked after 1 s, not 5.
  QElapsedTimer edit;
  edit.start();
  const Status notes = model->store()->set_notes(model->run(0).info.id, "while locked");
  std::printf("[ measure  ] a note while runs.db is write-locked: refused after %lld ms\n",
              static_cast<long long>(edit.elapsed()));
  EXPECT_NE(notes.message().find(db + " is locked by another process"), std::string::npos)
      << notes.to_string();
  EXPECT_LT(edit.elapsed(), 2500 * ::spillway::testing::kTimeScale);

  ASSERT_TRUE(writer->exec("COMMIT").ok());
  model->refresh();
  ASSERT_TRUE(waitForHistory(model));
  ASSERT_EQ(model->rowCount(), 1);
  EXPECT_EQ(model->run(0).info.status, RunStatus::kInterrupted);
}

// Live decides how a run ended when its worker is gone without last words from the store's row,
// after marking the row interrupted: a write that waits for a worker's write lock (1 s, the GUI's
// busy timeout), then a read. Both were done on the window's thread. With another connection
// holding the lock, the window keeps answering while the read runs, and the ending (interrupted,
// the message, the dialog) is shown once it is back; the row is marked once the lock is free.
TEST(WindowResponsive, LiveDecidingAWorkerIsGoneWhileTheStoreIsWriteLockedNeverBlocksTheWindow) {
  TempDir tmp;
  const std::string db = tmp.file("runs.db");
  const std::string runDir = tmp.file("run");
  std::filesystem::create_directories(runDir);
  QProcess worker;  // stands in for a worker that trains until it is killed
  worker.start("sleep", {"120"});
  ASSERT_TRUE(worker.waitForStarted());
  const qint64 pid = worker.processId();
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    RunInfo running;
    running.name = "killed";
    running.status = RunStatus::kRunning;
    running.run_dir = runDir;
    running.pid = pid;
    running.pid_start_ticks = static_cast<std::int64_t>(process_start_ticks(pid).value_or(0));
    running.boot_id = current_boot_id();
    running.host = current_host_name();
    ASSERT_TRUE((*store)->create_run(running).ok());
  }
  LivePage live;
  live.setDatabase(db);
  live.resize(1280, 720);
  live.show();
  live.attach(q(runDir), pid);
  live.tick();
  ASSERT_EQ(live.phase(), LivePage::Phase::kStarting);  // its worker is alive: watched
  auto writer = SqliteDb::open(db);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->exec("BEGIN IMMEDIATE").ok());  // as a worker's transaction holds it

  QSignalSpy ended(&live, &LivePage::runEnded);
  worker.kill();
  ASSERT_TRUE(worker.waitForFinished());
  EventLoopWatch watch;
  QElapsedTimer clock;
  clock.start();
  live.tick();  // the worker is gone: the store's row is read on a pool thread
  EXPECT_TRUE(live.storeBusy());
  EXPECT_NE(live.phase(), LivePage::Phase::kInterrupted);  // not decided before the read is back
  ASSERT_TRUE(waitForLive(&live));
  const qint64 gap = watch.longestGapMs();
  std::printf(
      "[ measure  ] Live deciding a gone worker's run with runs.db write-locked: ended after %lld "
      "ms, longest event-loop gap %lld ms\n",
      static_cast<long long>(clock.elapsed()), static_cast<long long>(gap));
  EXPECT_GE(clock.elapsed(), 900);  // the mark waited for the lock (1 s) and gave up
  EXPECT_LT(gap, 500 * ::spillway::testing::kTimeScale);
  EXPECT_EQ(live.phase(), LivePage::Phase::kInterrupted);
  EXPECT_TRUE(live.endMessage().startsWith(
      QString("The worker (pid %1) exited without finishing the run: it was killed or crashed.")
          .arg(pid)))
      << live.endMessage().toStdString();
  EXPECT_TRUE(live.statusText().startsWith("interrupted · ")) << live.statusText().toStdString();
  ASSERT_EQ(ended.size(), 1);
  auto* dialog = live.findChild<QMessageBox*>("runEndedDialog");
  ASSERT_NE(dialog, nullptr);
  EXPECT_EQ(dialog->text(), live.endMessage());
  dialog->accept();

  ASSERT_TRUE(writer->exec("COMMIT").ok());
  auto store = RunStore::open(db);  // marks the gone worker's row, now that it can write
  ASSERT_TRUE(store.ok());
  auto runs = (*store)->list_runs();
  ASSERT_TRUE(runs.ok());
  ASSERT_EQ(runs->size(), 1u);
  EXPECT_EQ(runs->front().status, RunStatus::kInterrupted);
}

}  // namespace
}  // namespace spillway::ui

namespace spillway::ui {
namespace {

// History's edits (tags, notes, a new name) are written on a pool thread. With a worker holding
// runs.db's write lock, an edit neither blocks the window nor is lost: History's line says it
// waits for the lock and that the edit is kept, the edit is tried again, and it lands once the
// lock is released.
TEST(WindowResponsive, AnEditWhileAWorkerHoldsTheWriteLockWaitsAndLandsWithoutBlockingTheWindow) {
  TempDir tmp;
  const std::string db = tmp.file("runs.db");
  std::string id;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok()) << store.status().to_string();
    RunInfo done;
    done.name = "finished";
    done.status = RunStatus::kCompleted;
    auto created = (*store)->create_run(done);
    ASSERT_TRUE(created.ok());
    id = *created;
  }
  MainWindow window(q(db));
  window.resize(1280, 720);
  window.show();
  window.showPage(MainWindow::kHistory);
  RunHistoryModel* model = window.historyModel();
  ASSERT_TRUE(waitForHistory(model));
  ASSERT_EQ(model->rowCount(), 1);
  auto* status = window.findChild<QLabel*>("historyEditStatus");
  ASSERT_NE(status, nullptr);

  auto writer = SqliteDb::open(db);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->exec("BEGIN IMMEDIATE").ok());  // as a worker's transaction holds it
  QTest::qWait(200);  // the first window's first paints, before the watch starts
  EventLoopWatch watch;
  RunEditQueue* edits = model->edits();
  edits->submit(RunEdit::setTags(id, "finished", {"baseline", "locked"}));
  edits->submit(RunEdit::setNotes(id, "finished", "written while locked"));
  edits->submit(RunEdit::rename(id, "finished", "renamed while locked"));
  // The user is told that the first edit waits for the lock and is kept.
  QSignalSpy waiting(edits, &RunEditQueue::waiting);
  ASSERT_TRUE(waiting.wait(static_cast<int>(10000 * ::spillway::testing::kTimeScale)));
  QTest::qWait(3000);  // it is tried again meanwhile
  EXPECT_TRUE(edits->waitingForLock());
  EXPECT_EQ(edits->pending(), 3);
  EXPECT_GE(edits->attempts(), 2);
  EXPECT_TRUE(status->isVisible());
  EXPECT_TRUE(status->text().contains("Waiting to save the tags of “finished”"))
      << status->text().toStdString();
  EXPECT_TRUE(status->text().contains("is locked by another process"))
      << status->text().toStdString();
  EXPECT_TRUE(status->text().contains("The edit is kept")) << status->text().toStdString();
  const qint64 gap = watch.longestGapMs();
  std::printf(
      "[ measure  ] 3 edits while runs.db is write-locked for 3 s: %d tries, longest "
      "event-loop gap %lld ms\n",
      edits->attempts(), static_cast<long long>(gap));
  // An edit written on the window's thread would hold it for the connection's 1 s busy timeout at
  // each try; half of that is the bound (alone, 42-80 ms; 393 ms once beside another test's
  // OpenBLAS threads on 2 cores, as Live's test beside it allows).
  EXPECT_LT(gap, 500 * ::spillway::testing::kTimeScale);

  // Released: all three land, in order, and History shows them.
  ASSERT_TRUE(writer->exec("COMMIT").ok());
  ASSERT_TRUE(waitForEdits(model));
  EXPECT_FALSE(edits->waitingForLock());
  EXPECT_EQ(status->text().toStdString(), "Saved the new name of “finished”.");
  ASSERT_EQ(model->rowCount(), 1);
  EXPECT_EQ(model->run(0).info.name, "renamed while locked");
  EXPECT_EQ(model->run(0).info.notes, "written while locked");
  EXPECT_EQ(model->run(0).info.tags, (std::vector<std::string>{"baseline", "locked"}));
}

// An edit the store refuses for good (no such run) is said under the table, in red.
TEST(WindowResponsive, AnEditTheStoreRefusesIsShown) {
  TempDir tmp;
  const std::string db = tmp.file("runs.db");
  ASSERT_TRUE(RunStore::open(db).ok());
  MainWindow window(q(db));
  window.showPage(MainWindow::kHistory);
  RunHistoryModel* model = window.historyModel();
  ASSERT_TRUE(waitForHistory(model));
  model->edits()->submit(RunEdit::setNotes("no-such-run", "gone", "lost?"));
  ASSERT_TRUE(waitForEdits(model));
  auto* status = window.findChild<QLabel*>("historyEditStatus");
  ASSERT_NE(status, nullptr);
  EXPECT_TRUE(status->text().startsWith("Could not save the notes of “gone”: "))
      << status->text().toStdString();
}

}  // namespace
}  // namespace spillway::ui

namespace spillway::ui {
namespace {

// The model field is checked after a pause in the typing, on a pool thread (issue 22 point 5):
// typing a model folder's path key by key opens its config.json and safetensors once, after the
// last key, and the window's event loop never waits on it. Launch, Plan and Save take the field
// as typed: a check still to come runs at once.
TEST(WindowResponsive, TypingAModelPathChecksItOnceOffTheWindowsThread) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  MainWindow window(q(tmp.path() + "/runs.db"));
  window.resize(1280, 720);
  window.showPage(MainWindow::kNewRun);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  NewRunPage* page = window.newRunPage();
  ModelPicker* picker = page->modelPicker();
  auto* field = picker->findChild<QComboBox*>();
  ASSERT_NE(field, nullptr);
  const QString path = q(data_path("models/stories260K"));
  QSignalSpy checked(picker, &ModelPicker::checked);
  const int before = picker->inspections();
  {
    EventLoopWatch watch;
    field->lineEdit()->setFocus();
    for (const QChar c : path) {
      QTest::keyClick(field->lineEdit(), c.toLatin1());
      QTest::qWait(20);  // faster than the pause
    }
    EXPECT_EQ(field->currentText(), path);
    EXPECT_TRUE(picker->checking());
    EXPECT_EQ(picker->inspections(), before);  // nothing opened while typing
    ASSERT_TRUE(checked.wait(static_cast<int>(10000 * ::spillway::testing::kTimeScale)));
    const qint64 gap = watch.longestGapMs();
    std::printf(
        "typed a %lld-character model path: %d check(s), the event loop's longest gap "
        "%lld ms\n",
        static_cast<long long>(path.size()), picker->inspections() - before,
        static_cast<long long>(gap));
    EXPECT_LT(gap, 100 * ::spillway::testing::kTimeScale);
  }
  EXPECT_EQ(picker->inspections(), before + 1);
  EXPECT_EQ(checked.count(), 1);
  EXPECT_FALSE(picker->checking());
  ASSERT_TRUE(page->modelInfo().ok) << page->modelInfo().error.toStdString();
  EXPECT_EQ(page->modelInfo().layers, 5);
  EXPECT_EQ(page->findChild<QLabel*>("modelSummary")->text(), page->modelInfo().summary());

  // Launch takes the field as typed: a path typed a moment ago is checked at once.
  QTest::keyClick(field->lineEdit(), 'x');
  ASSERT_TRUE(picker->checking());
  QString error;
  EXPECT_TRUE(page->writePlanJob(&error).isEmpty());
  EXPECT_FALSE(picker->checking());
  EXPECT_TRUE(error.startsWith("The model is not usable: ")) << error.toStdString();
}

}  // namespace
}  // namespace spillway::ui

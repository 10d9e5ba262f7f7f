// History's Delete as the user meets it: the confirmation says what goes (the row; the run's
// files, with their size) and what stays and why; a folder that another row names (a resumed
// run's) or that a live worker writes to is never removed, and neither is a file in the folder that
// is not the run's. Drives the real page: select a row, press Delete, read and answer the dialog.
// Also Open folder, where it cannot open the folder: the message says why and where it is.
#include <gtest/gtest.h>

#include <QApplication>
#include <QLabel>
#include <QMessageBox>
#include <QProcess>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTest>
#include <QTimer>
#include <filesystem>
#include <fstream>

#include "HistoryPage.h"
#include "RunEditQueue.h"
#include "RunHistoryModel.h"
#include "history-wait.h"
#include "history/process-liveness.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "history/sqlite-util.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::TempDir;

// A run folder as the worker leaves it: job.json, events.jsonl, two checkpoints and an export
// (1,000 + 2,000 + 2 x 10,000 + 50,000 bytes).
void makeRunFolder(const std::string& dir) {
  fs::create_directories(dir + "/checkpoints/step-000010");
  fs::create_directories(dir + "/checkpoints/step-000020");
  fs::create_directories(dir + "/export");
  auto write = [](const std::string& path, size_t bytes) {
    std::ofstream(path) << std::string(bytes, 'x');
  };
  write(dir + "/job.json", 1000);
  write(dir + "/events.jsonl", 2000);
  write(dir + "/checkpoints/step-000010/model.safetensors", 10000);
  write(dir + "/checkpoints/step-000020/model.safetensors", 10000);
  write(dir + "/export/model.safetensors", 50000);
}

std::string addRun(RunStore& store, const std::string& name, RunStatus status,
                   const std::string& dir, std::optional<qint64> livePid = std::nullopt) {
  RunInfo info;
  info.name = name;
  info.status = status;
  info.run_dir = dir;
  if (livePid) {
    info.pid = *livePid;
    info.pid_start_ticks = static_cast<std::int64_t>(process_start_ticks(*livePid).value_or(0));
    info.boot_id = current_boot_id();
    info.host = current_host_name();
  }
  auto id = store.create_run(info);
  EXPECT_TRUE(id.ok());
  return id.ok() ? *id : std::string();
}

// Selects the row of run `name`, presses the button `button` and answers the dialog that comes
// with `answer` (a button's text); returns the dialog's text ("" when none came).
QString pressOnRow(HistoryPage& page, const QString& name, const QString& button,
                   const QString& answer) {
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(page.table()->model());
  for (int r = 0; r < proxy->rowCount(); ++r) {
    const QModelIndex i = proxy->index(r, RunHistoryModel::kName);
    if (i.data().toString() == name) page.table()->setCurrentIndex(i);
  }
  EXPECT_EQ(page.table()->currentIndex().data().toString(), name);
  QPushButton* del = nullptr;
  for (QPushButton* b : page.findChildren<QPushButton*>())
    if (b->text() == button) del = b;
  EXPECT_NE(del, nullptr);
  if (!del) return {};
  QString text;
  QTimer::singleShot(100, [&] {
    auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
    if (!box) return;
    text = box->text();
    for (QAbstractButton* b : box->buttons())
      if (b->text().remove('&') == answer) return b->click();
    ADD_FAILURE() << "no button " << answer.toStdString() << " in " << text.toStdString();
    box->reject();
  });
  QTest::mouseClick(del, Qt::LeftButton);
  return text;
}

QString pressDelete(HistoryPage& page, RunHistoryModel& model, const QString& name,
                    const QString& answer) {
  (void)model;
  return pressOnRow(page, name, "Delete", answer);
}

TEST(HistoryDelete, KeepsAFolderThatAnotherRunUsesAndSaysWhatGoes) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  const std::string folder = tmp.path() + "/runs/20250101-shakespeare";
  makeRunFolder(folder);
  std::ofstream(folder + "/notes.txt") << "mine";  // the user's own file in the run folder
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    addRun(**store, "shakespeare", RunStatus::kStopped, folder);
    addRun(**store, "shakespeare (resumed)", RunStatus::kCompleted, folder);  // Resume's row
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));

  // The stopped row: its folder holds the resumed run's checkpoints and export, so it stays.
  QString text = pressDelete(page, model, "shakespeare", "Delete");
  EXPECT_EQ(text.toStdString(),
            "Delete the run \"shakespeare\" from History (its metrics, samples and events)?\n\n"
            "Its folder " +
                folder +
                " stays, and nothing in it is removed: it is also the folder of "
                "\"shakespeare (resumed)\" (completed).");
  ASSERT_TRUE(waitForEdits(&model));  // the deletion is written, and History has read it
  ASSERT_EQ(model.rowCount(), 1);
  EXPECT_EQ(model.run(0).info.name, "shakespeare (resumed)");
  EXPECT_TRUE(fs::exists(folder + "/export/model.safetensors"));
  EXPECT_TRUE(fs::exists(folder + "/checkpoints/step-000020/model.safetensors"));

  // Cancel removes nothing.
  text = pressDelete(page, model, "shakespeare (resumed)", "Cancel");
  EXPECT_FALSE(text.isEmpty());
  ASSERT_TRUE(waitForEdits(&model));  // the deletion is written, and History has read it
  EXPECT_EQ(model.rowCount(), 1);
  EXPECT_TRUE(fs::exists(folder + "/export/model.safetensors"));

  // The last row that uses it: the run's files go, the user's file and so the folder stay.
  text = pressDelete(page, model, "shakespeare (resumed)", "Delete");
  EXPECT_EQ(
      text.toStdString(),
      "Delete the run \"shakespeare (resumed)\" from History (its metrics, samples and events)?\n\n"
      "These files go, 73.0 kB in all: 2 checkpoints, events.jsonl, the exported model, job.json, "
      "in " +
          folder + ".\n\nThe folder stays with what is not the run's: notes.txt.");
  ASSERT_TRUE(waitForEdits(&model));  // the deletion is written, and History has read it
  EXPECT_EQ(model.rowCount(), 0);
  EXPECT_FALSE(fs::exists(folder + "/checkpoints"));
  EXPECT_FALSE(fs::exists(folder + "/export"));
  EXPECT_FALSE(fs::exists(folder + "/events.jsonl"));
  EXPECT_TRUE(fs::exists(folder + "/notes.txt"));
}

TEST(HistoryDelete, NeverRemovesWhatALiveWorkerUses) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  const std::string folder = tmp.path() + "/run";
  makeRunFolder(folder);
  QProcess worker;  // stands in for a worker that is still training in `folder`
  worker.start("sleep", {"120"});
  ASSERT_TRUE(worker.waitForStarted());
  const qint64 pid = worker.processId();
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    addRun(**store, "first attempt", RunStatus::kFailed,
           folder + "/");  // the same folder, spelt otherwise
    addRun(**store, "training now", RunStatus::kRunning, folder, pid);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  ASSERT_EQ(model.rowCount(), 2);  // the live worker's run is still running after the store's check
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));

  QString text = pressDelete(page, model, "training now", "OK");
  EXPECT_EQ(text, "\"training now\" is still running; stop it first.");
  ASSERT_TRUE(waitForEdits(&model));  // the deletion is written, and History has read it
  EXPECT_EQ(model.rowCount(), 2);

  text = pressDelete(page, model, "first attempt", "Delete");
  EXPECT_TRUE(
      text.endsWith(QString("it is also the folder of \"training now\" (running, its worker pid %1 "
                            "writes there).")
                        .arg(pid)))
      << text.toStdString();
  ASSERT_TRUE(waitForEdits(&model));  // the deletion is written, and History has read it
  EXPECT_EQ(model.rowCount(), 1);
  EXPECT_TRUE(fs::exists(folder + "/checkpoints/step-000010/model.safetensors"));
  EXPECT_TRUE(fs::exists(folder + "/events.jsonl"));
  worker.kill();
  worker.waitForFinished();
}

TEST(HistoryDelete, ARunWithoutAFolderLosesOnlyItsRow) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    addRun(**store, "failed at start", RunStatus::kFailed, tmp.path() + "/runs/never-made");
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  const QString text = pressDelete(page, model, "failed at start", "Delete");
  EXPECT_EQ(text,
            "Delete the run \"failed at start\" from History (its metrics, samples and events)?");
  ASSERT_TRUE(waitForEdits(&model));  // the deletion is written, and History has read it
  EXPECT_EQ(model.rowCount(), 0);
}

// Delete removes only what Spillway wrote: a user's files beside the run's, in its checkpoints and
// in its export stay (the confirmation and the status line say so), with the folders that hold
// them; and the run's launch folder under jobs/ (job.json and the worker's output, which a run that
// failed at start leaves behind) goes too, while another run's stays.
TEST(HistoryDelete, RemovesOnlySpillwaysFilesAndTheRunsLaunchFolder) {
  TempDir tmp;
  const QByteArray oldXdg = qgetenv("XDG_DATA_HOME");
  qputenv("XDG_DATA_HOME", QByteArray::fromStdString(tmp.path() + "/xdg"));
  struct Restore {
    QByteArray value;
    ~Restore() { value.isNull() ? qunsetenv("XDG_DATA_HOME") : qputenv("XDG_DATA_HOME", value); }
  } restore{oldXdg};
  const std::string db = tmp.path() + "/runs.db", folder = tmp.path() + "/runs/failed-run";
  makeRunFolder(folder);
  std::ofstream(folder + "/notes.txt") << "mine";
  std::ofstream(folder + "/checkpoints/best.txt") << "step 20";
  std::ofstream(folder + "/export/README.md") << "model card";
  std::string id, other;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    id = addRun(**store, "failed run", RunStatus::kFailed, folder);
    other = addRun(**store, "other run", RunStatus::kCompleted, tmp.path() + "/runs/other");
  }
  const std::string jobs = tmp.path() + "/xdg/spillway/jobs";
  auto launchFolder = [&](const std::string& name, const std::string& runId) {
    const std::string dir = jobs + "/" + name;
    fs::create_directories(dir);
    for (const char* f : {"job.json", "worker.out", "worker.err"})
      std::ofstream(dir + "/" + f) << "x";
    std::ofstream(dir + "/spillway-launch.json") << "{\"run_id\": \"" << runId << "\"}";
    return dir;
  };
  const std::string mine = launchFolder("20261127-101010-failed-run", id);
  const std::string theirs = launchFolder("20261127-111111-other-run", other);

  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  const QString text = pressDelete(page, model, "failed run", "Delete");
  EXPECT_TRUE(text.endsWith(
      "\n\nThe folder stays with what is not the run's: checkpoints/best.txt, export/README.md, "
      "notes.txt."))
      << text.toStdString();
  ASSERT_TRUE(waitForEdits(&model));
  EXPECT_EQ(model.rowCount(), 1);
  std::ifstream notes(folder + "/notes.txt"), best(folder + "/checkpoints/best.txt"),
      card(folder + "/export/README.md");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(notes), {}), "mine");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(best), {}), "step 20");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(card), {}), "model card");
  for (const char* gone : {"/job.json", "/events.jsonl", "/checkpoints/step-000010",
                           "/checkpoints/step-000020", "/export/model.safetensors"})
    EXPECT_FALSE(fs::exists(folder + gone)) << gone;
  EXPECT_FALSE(fs::exists(mine));
  EXPECT_TRUE(fs::exists(theirs + "/worker.err"));
  bool said = false;
  for (QLabel* l : page.findChildren<QLabel*>())
    said |= l->text().contains("Kept what Spillway did not write: " + q(folder) +
                               "/checkpoints/best.txt");
  EXPECT_TRUE(said);
}

// Delete pressed twice on a run whose deletion is still queued (a worker holds runs.db's write
// lock) used to queue a second deletion, which ended in "Could not save the deletion …" once the
// first had removed the row. Now Delete is off on that row, a second deleteRun queues nothing, and
// the one deletion lands when the lock is released.
TEST(HistoryDelete, ARunWhoseDeletionIsQueuedIsNotDeletedTwice) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string id;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    id = addRun(**store, "twice", RunStatus::kStopped, tmp.path() + "/runs/never-made");
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  auto writer = SqliteDb::open(db);
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE(writer->exec("BEGIN IMMEDIATE").ok());  // as a worker's transaction holds it

  QSignalSpy written(model.edits(), &RunEditQueue::written);
  pressDelete(page, model, "twice", "Delete");
  ASSERT_EQ(model.edits()->pending(), 1);
  QPushButton* del = nullptr;
  for (QPushButton* b : page.findChildren<QPushButton*>())
    if (b->text() == "Delete") del = b;
  ASSERT_NE(del, nullptr);
  EXPECT_FALSE(del->isEnabled());  // the row is being deleted
  EXPECT_EQ(del->toolTip(), "This run is being deleted");
  QTest::mouseClick(del, Qt::LeftButton);  // no confirmation comes, nothing is queued
  EXPECT_EQ(HistoryPage::deleteRun(&model, q(id)), "");
  EXPECT_EQ(model.edits()->pending(), 1);

  ASSERT_TRUE(writer->exec("COMMIT").ok());
  ASSERT_TRUE(waitForEdits(&model));
  ASSERT_EQ(written.size(), 1);
  EXPECT_EQ(written[0][1].toString(), "");
  EXPECT_EQ(model.rowCount(), 0);
  auto* status = page.findChild<QLabel*>("historyEditStatus");
  ASSERT_NE(status, nullptr);
  EXPECT_EQ(status->text(), "Saved the deletion of “twice”.");
}

// Open folder used to fail without a word: with no xdg-open (a minimal system without xdg-utils)
// or a folder that is gone, nothing happened. Now a message says why and names the folder.
TEST(HistoryOpenFolder, SaysWhyItCannotOpenTheFolderAndWhereItIs) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  const std::string folder = tmp.path() + "/runs/kept";
  makeRunFolder(folder);
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    addRun(**store, "gone", RunStatus::kCompleted, tmp.path() + "/runs/moved away");
    addRun(**store, "kept", RunStatus::kCompleted, folder);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));

  EXPECT_EQ(pressOnRow(page, "gone", "Open folder", "OK").toStdString(),
            "The run's folder " + tmp.path() +
                "/runs/moved away is not there any more (moved or deleted).");

  // No program that opens folders: PATH without xdg-open (and the offscreen platform has none of
  // its own).
  const QByteArray path = qgetenv("PATH");
  qputenv("PATH", QByteArray::fromStdString(tmp.path() + "/no-programs"));
  const QString text = pressOnRow(page, "kept", "Open folder", "OK");
  qputenv("PATH", path);
  EXPECT_EQ(text.toStdString(),
            "No program here opens folders (xdg-open, from the package xdg-utils, is what Spillway "
            "asks). The run's folder is " +
                folder);
  EXPECT_TRUE(fs::exists(folder + "/job.json"));
}

// History removes a killed writer's unfinished checkpoint (step-N.tmp-<pid>, as big as a
// checkpoint) of a run no worker holds, when it reads the runs (issue 28 point 4); a run folder a
// worker holds (its lock taken) keeps its own.
TEST(HistoryDelete, AKilledWritersUnfinishedCheckpointIsRemovedWhenNoWorkerHoldsTheFolder) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  const std::string idle = tmp.path() + "/idle", held = tmp.path() + "/held";
  for (const std::string& run : {idle, held}) {
    fs::create_directories(run + "/checkpoints/step-000004.tmp-1");
    fs::create_directories(run + "/checkpoints/step-000002");
    std::ofstream(run + "/checkpoints/step-000004.tmp-1/model.safetensors") << "half";
  }
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    addRun(**store, "idle", RunStatus::kInterrupted, idle);
    addRun(**store, "held", RunStatus::kInterrupted, held);
  }
  auto lock = RunFolderLock::acquire(held);  // as a worker resuming that run would hold it
  ASSERT_TRUE(lock.ok());
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  EXPECT_FALSE(fs::exists(idle + "/checkpoints/step-000004.tmp-1"));
  EXPECT_TRUE(fs::exists(idle + "/checkpoints/step-000002"));
  EXPECT_TRUE(fs::exists(held + "/checkpoints/step-000004.tmp-1"));
}

}  // namespace
}  // namespace spillway::ui

// Issue 13 point 7 as the user meets it: eval loss in History and Compare; File › Save job file
// writes a job the real worker runs, File › Open job file fills the form and refuses an unknown
// key by name; the last form comes back when the window opens again; Notes works after Tags; Plan
// and Copy command line leave no folder behind in jobs/ each time.
#include <gtest/gtest.h>
#include <qcustomplot.h>

#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QClipboard>
#include <QComboBox>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QInputDialog>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProcess>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QTest>
#include <QTimer>
#include <filesystem>
#include <fstream>
#include <functional>

#include "ComparePage.h"
#include "HistoryPage.h"
#include "MainWindow.h"
#include "NewRunPage.h"
#include "PlanView.h"
#include "RunHistoryModel.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::data_path;
using spillway::testing::TempDir;

// Runs `answer` on the modal dialog that `open` brings up; fails when none comes.
void answerModal(const std::function<void()>& open, const std::function<void(QWidget*)>& answer) {
  bool answered = false;
  QTimer::singleShot(200, [&] {
    QWidget* modal = QApplication::activeModalWidget();
    if (!modal) return;
    answered = true;
    answer(modal);
  });
  open();
  EXPECT_TRUE(answered) << "no dialog came";
}

QPushButton* buttonOf(QWidget* page, const QString& text) {
  for (QPushButton* b : page->findChildren<QPushButton*>())
    if (b->text() == text) return b;
  return nullptr;
}

QAction* menuAction(QMainWindow& window, const QString& menu, const QString& text) {
  for (QAction* m : window.menuBar()->actions()) {
    if (m->text() != menu || !m->menu()) continue;
    for (QAction* a : m->menu()->actions())
      if (a->text() == text) return a;
  }
  return nullptr;
}

// A run with three steps and evaluations at steps 0 and 2.
std::string runWithEvals(RunStore& store, const std::string& name, double lastEval) {
  RunInfo info;
  info.name = name;
  info.status = RunStatus::kCompleted;
  auto id = store.create_run(info);
  EXPECT_TRUE(id.ok());
  for (int s = 1; s <= 3; ++s)
    EXPECT_TRUE(
        store.add_metric(*id, MetricRow{s, 3.0 - 0.25 * s, 1e-3, 1.0, 100 * s, 100.0, 0.1, 1.0 * s})
            .ok());
  EXPECT_TRUE(store.add_eval(*id, EvalRow{0, 3.5, std::nullopt, 0.0}).ok());
  EXPECT_TRUE(store.add_eval(*id, EvalRow{2, lastEval, std::nullopt, 2.0}).ok());
  return *id;
}

TEST(EvalLoss, HistoryHasAColumnAndCompareDrawsEachRunsEvals) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string a, b;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    a = runWithEvals(**store, "a", 2.75);
    b = runWithEvals(**store, "b", 2.5);
    RunInfo none;
    none.name = "no evals";
    none.status = RunStatus::kStopped;
    ASSERT_TRUE((*store)->create_run(none).ok());
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  EXPECT_EQ(
      model.headerData(RunHistoryModel::kEvalLoss, Qt::Horizontal, Qt::DisplayRole).toString(),
      "Eval loss");
  auto cell = [&](const std::string& id, int role = Qt::DisplayRole) {
    return model.data(model.index(model.rowOfRun(q(id)), RunHistoryModel::kEvalLoss), role);
  };
  EXPECT_EQ(cell(a).toString(), "2.7500");  // the last evaluation's, not the first
  EXPECT_EQ(cell(b).toString(), "2.5000");
  EXPECT_EQ(cell(a, Qt::ToolTipRole).toString(), "The last evaluation, at step 2");
  for (int r = 0; r < model.rowCount(); ++r) {
    if (model.run(r).info.name == "no evals")
      EXPECT_EQ(model.data(model.index(r, RunHistoryModel::kEvalLoss), Qt::DisplayRole).toString(),
                "—");
  }

  ComparePage compare(&model);
  compare.setRuns({q(a), q(b)});
  ASSERT_TRUE(waitForCompare(&compare));
  QCustomPlot* plot = compare.lossPlot();
  ASSERT_EQ(plot->graphCount(), 4);  // each run's loss and its eval loss
  for (int g : {1, 3}) {
    const QCPGraph* eval = plot->graph(g);
    EXPECT_TRUE(eval->name().endsWith(" · eval")) << eval->name().toStdString();
    ASSERT_EQ(eval->data()->size(), 2);
    EXPECT_EQ(eval->data()->at(0)->key, 0.0);  // before the first step
    EXPECT_EQ(eval->data()->at(1)->key, 2.0);
    EXPECT_EQ(eval->data()->at(0)->value, 3.5);
  }
  EXPECT_EQ(plot->graph(1)->data()->at(1)->value, 2.75);
  EXPECT_EQ(plot->graph(3)->data()->at(1)->value, 2.5);
  // Against tokens, the eval at step 2 lies where step 2's tokens are.
  compare.setXAxis(ComparePage::kTokens);
  EXPECT_EQ(plot->graph(1)->data()->at(1)->key, 200.0);
}

TEST(HistoryPage, NotesWorkAfterEditingTags) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string id;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    id = runWithEvals(**store, "tagged", 2.0);
    runWithEvals(**store, "other", 2.0);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(page.table()->model());
  page.table()->selectRow(proxy->mapFromSource(model.index(model.rowOfRun(q(id)), 0)).row());
  page.table()->setCurrentIndex(proxy->mapFromSource(model.index(model.rowOfRun(q(id)), 0)));
  ASSERT_EQ(page.selectedRunIds(), QStringList{q(id)});

  answerModal([&] { QTest::mouseClick(buttonOf(&page, "Tags…"), Qt::LeftButton); },
              [](QWidget* w) {
                auto* d = qobject_cast<QInputDialog*>(w);
                ASSERT_NE(d, nullptr);
                d->setTextValue("baseline, lr-sweep");
                d->accept();
              });
  EXPECT_EQ(page.selectedRunIds(), QStringList{q(id)});  // the refresh kept the selection
  answerModal([&] { QTest::mouseClick(buttonOf(&page, "Notes…"), Qt::LeftButton); },
              [](QWidget* w) {
                auto* d = qobject_cast<QInputDialog*>(w);
                ASSERT_NE(d, nullptr);
                d->setTextValue("warmup too short");
                d->accept();
              });
  ASSERT_TRUE(waitForEdits(&model));  // the edits are written on a pool thread
  auto store = RunStore::open(db);
  ASSERT_TRUE(store.ok());
  auto run = (*store)->get_run(id);
  ASSERT_TRUE(run.ok());
  EXPECT_EQ(run->notes, "warmup too short");
  EXPECT_EQ(run->tags, (std::vector<std::string>{"baseline", "lr-sweep"}));
}

// A form a person filled: stories260K on tiny Shakespeare, a learning rate in scientific notation.
void fillForm(NewRunPage& page) {
  page.setModelPath(q(data_path("models/stories260K")));
  page.setDatasetPath(q(data_path("datasets/tinyshakespeare/input.txt")));
  page.findChild<QLineEdit*>("learningRate")->setText("3e-3");
  page.findChild<QSpinBox*>("seqLen")->setValue(64);
  page.findChild<QComboBox*>("chatTemplate")->setCurrentText("chatml");
  page.findChild<QCheckBox*>("packing")->setChecked(true);
}

TEST(JobFile, SaveWritesAJobTheWorkerRunsAndOpenFillsTheForm) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  TempDir tmp;
  MainWindow window(q(tmp.path() + "/runs.db"));
  fillForm(*window.newRunPage());
  QAction* save = menuAction(window, "&File", "&Save job file…");
  ASSERT_NE(save, nullptr);
  EXPECT_EQ(save->shortcut(), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S));  // Ctrl+S: Live's
  const QString path = q(tmp.path() + "/saved job.json");
  answerModal([&] { save->trigger(); },
              [&](QWidget* w) {
                auto* d = qobject_cast<QFileDialog*>(w);
                ASSERT_NE(d, nullptr);
                d->findChild<QLineEdit*>("fileNameEdit")->setText(path);
                QMetaObject::invokeMethod(d, "accept");
              });
  ASSERT_TRUE(QFileInfo::exists(path));
  // The worker reads it: its plan takes the file as saved.
  QProcess worker;
  worker.start(SPILLWAY_WORKER_BINARY, {"plan", path, "--json"});
  ASSERT_TRUE(worker.waitForFinished(120000));
  EXPECT_EQ(worker.exitCode(), 0) << worker.readAllStandardError().toStdString();
  QFile f(path);
  ASSERT_TRUE(f.open(QIODevice::ReadOnly));
  const QJsonObject job = QJsonDocument::fromJson(f.readAll()).object();
  EXPECT_EQ(job["train"].toObject()["lr"].toDouble(), 3e-3);
  EXPECT_EQ(job["data"].toObject()["template"].toString(), "chatml");
  EXPECT_TRUE(job["data"].toObject()["packing"].toBool());
  EXPECT_FALSE(job["output"].toObject().contains("run_dir"));  // each run gets its own folder

  // Open fills a fresh window's form with it.
  MainWindow other(q(tmp.path() + "/runs.db"));
  ASSERT_TRUE(other.openJob(path));
  const JobSettings s = other.newRunPage()->settings();
  EXPECT_EQ(s.lr, 3e-3);
  EXPECT_EQ(s.seqLen, 64);
  EXPECT_EQ(s.chatTemplate, "chatml");
  EXPECT_TRUE(s.packing);
  EXPECT_EQ(s.trainPath, q(data_path("datasets/tinyshakespeare/input.txt")));
}

TEST(JobFile, OpenRefusesAnUnknownKeyByNameAndLeavesTheFormAlone) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  MainWindow window(q(tmp.path() + "/runs.db"));
  window.newRunPage()->findChild<QSpinBox*>("seqLen")->setValue(100);
  const std::string path = tmp.path() + "/typo.json";
  std::ofstream(path) << R"({"name": "typo", "model": {"path": ")"
                      << data_path("models/stories260K")
                      << R"("}, "data": {"train": "x.txt", "seq_length": 512}})";
  QString shown;
  answerModal([&] { EXPECT_FALSE(window.openJob(q(path))); },
              [&](QWidget* w) {
                auto* box = qobject_cast<QMessageBox*>(w);
                ASSERT_NE(box, nullptr);
                shown = box->text();
                box->accept();
              });
  std::printf("Open job file said: %s\n", shown.toStdString().c_str());
  EXPECT_TRUE(shown.contains("data.seq_length")) << shown.toStdString();
  EXPECT_TRUE(shown.startsWith(q(path) + " is not a job the worker takes: "));
  EXPECT_EQ(window.newRunPage()->settings().seqLen, 100);  // untouched
  EXPECT_NE(window.newRunPage()->settings().name, "typo");
}

TEST(JobFile, TheLastFormComesBackWhenTheWindowOpensAgain) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  {
    MainWindow first(q(tmp.path() + "/runs.db"));
    fillForm(*first.newRunPage());
    for (QLineEdit* e : first.newRunPage()->findChildren<QLineEdit*>())
      if (e->property("jobKey").toString() == "name") e->setText("restored run");
    first.show();
    first.close();
  }
  MainWindow second(q(tmp.path() + "/runs.db"));
  const JobSettings s = second.newRunPage()->settings();
  EXPECT_EQ(s.name, "restored run");
  EXPECT_EQ(s.lr, 3e-3);
  EXPECT_EQ(s.seqLen, 64);
  EXPECT_EQ(s.chatTemplate, "chatml");
  EXPECT_TRUE(s.packing);
  EXPECT_EQ(s.modelPath, q(data_path("models/stories260K")));
  EXPECT_EQ(s.trainPath, q(data_path("datasets/tinyshakespeare/input.txt")));
  EXPECT_TRUE(second.newRunPage()->modelInfo().ok);  // checked again, as when chosen
  EXPECT_TRUE(s.runDir.isEmpty());
  // A fresh start (no settings) keeps the schema's defaults.
  QSettings().remove(MainWindow::kLastJobKey);
  MainWindow third(q(tmp.path() + "/runs.db"));
  EXPECT_EQ(third.newRunPage()->settings().seqLen, JobSettings().seqLen);
}

QStringList entries(const QString& dir) {
  return QDir(dir).entryList(QDir::AllEntries | QDir::NoDotAndDotDot);
}

TEST(JobFile, PlanAndCopyCommandLineLeaveNoFolderEachTime) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  TempDir tmp;
  qputenv("XDG_DATA_HOME", QByteArray::fromStdString(tmp.path() + "/xdg"));
  qputenv("SPILLWAY_WORKER", SPILLWAY_WORKER_BINARY);
  const QString jobs = q(tmp.path() + "/xdg/spillway/jobs");
  QString planJob;
  {
    NewRunPage page;
    fillForm(page);
    QSignalSpy planned(&page, &NewRunPage::planned);
    for (int i = 0; i < 2; ++i) {
      QTest::mouseClick(buttonOf(&page, "Plan"), Qt::LeftButton);
      ASSERT_TRUE(planned.wait(120000));
    }
    EXPECT_TRUE(page.planView()->plan().ok) << page.planView()->plan().error.toStdString();
    EXPECT_EQ(entries(jobs), QStringList());  // two plans, nothing in jobs/
    QString error;
    planJob = page.writePlanJob(&error);
    ASSERT_FALSE(planJob.isEmpty()) << error.toStdString();
    for (int i = 0; i < 3; ++i)
      QTest::mouseClick(buttonOf(&page, "Copy command line"), Qt::LeftButton);
    const QStringList copied = entries(jobs);
    ASSERT_EQ(copied.size(), 1) << copied.join(", ").toStdString();  // the same form: one file
    EXPECT_TRUE(copied[0].startsWith("fine-tune-") && copied[0].endsWith(".json"))
        << copied[0].toStdString();
    EXPECT_TRUE(QApplication::clipboard()->text().contains(jobs + "/" + copied[0]));
    page.findChild<QSpinBox*>("seqLen")->setValue(128);
    QTest::mouseClick(buttonOf(&page, "Copy command line"), Qt::LeftButton);
    EXPECT_EQ(entries(jobs).size(), 2);  // another form, another file
    EXPECT_TRUE(QFileInfo::exists(planJob));
  }
  EXPECT_FALSE(QFileInfo::exists(planJob));  // the plan's folder goes with the page
  EXPECT_FALSE(QFileInfo::exists(q(tmp.path() + "/xdg/spillway/runs")));
}

}  // namespace
}  // namespace spillway::ui

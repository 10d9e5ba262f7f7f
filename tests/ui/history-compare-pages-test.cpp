// History and Compare start somewhere (issue 26): Compare opened on its own has a run picker and
// an empty state that says what to do, never empty axes; History renames a run (F2, through the
// store's edit queue) and shows each run's id beside its name, so two runs of one name are told
// apart; a failed run's row says why it failed; Delete with several rows selected deletes every
// one of them after one confirmation that lists them; the current run's loss curve is drawn below
// the table. Each drives the real page on a run store of its own.
#include <gtest/gtest.h>
#include <qcustomplot.h>

#include <QApplication>
#include <QInputDialog>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QTest>
#include <QTimer>
#include <filesystem>
#include <fstream>

#include "ComparePage.h"
#include "HistoryPage.h"
#include "RunHistoryModel.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::TempDir;

// A run of `name` with `losses` at steps 1, 2, ... and `evals` (step, loss), in a folder of its
// own under `root` (job.json and events.jsonl, as a worker leaves them) when `root` is not "".
std::string addRun(RunStore& store, const std::string& name, RunStatus status,
                   const std::vector<double>& losses = {},
                   const std::vector<std::pair<int, double>>& evals = {},
                   const std::string& root = {}) {
  RunInfo info;
  info.id = RunStore::new_run_id();
  info.name = name;
  info.status = status;
  if (!root.empty()) {
    info.run_dir = root + "/" + info.id;
    fs::create_directories(info.run_dir);
    std::ofstream(info.run_dir + "/job.json") << "{}";
    std::ofstream(info.run_dir + "/events.jsonl") << "\n";
  }
  auto id = store.create_run(info);
  EXPECT_TRUE(id.ok());
  if (!id.ok()) return {};
  for (size_t k = 0; k < losses.size(); ++k) {
    MetricRow m;
    m.step = static_cast<std::int64_t>(k + 1);
    m.loss = losses[k];
    m.tokens = m.step * 1000;
    m.tokens_per_s = 500;
    m.t_s = static_cast<double>(m.step);
    EXPECT_TRUE(store.add_metric(*id, m).ok());
  }
  for (const auto& [step, loss] : evals) {
    EvalRow e;
    e.step = step;
    e.loss = loss;
    EXPECT_TRUE(store.add_eval(*id, e).ok());
  }
  return *id;
}

QModelIndex rowOf(HistoryPage& page, const std::string& id, int column = RunHistoryModel::kName) {
  auto* proxy = qobject_cast<QSortFilterProxyModel*>(page.table()->model());
  for (int r = 0; r < proxy->rowCount(); ++r)
    if (proxy->index(r, RunHistoryModel::kRunId).data().toString() == q(id))
      return proxy->index(r, column);
  return {};
}

// Answers every dialog that comes while `act` runs: `answer(dialog)` reads and closes it. Returns
// how many came.
int answeringDialogs(const std::function<void()>& act,
                     const std::function<void(QWidget*)>& answer) {
  int seen = 0;
  QTimer timer;
  timer.setInterval(20);
  QObject::connect(&timer, &QTimer::timeout, [&] {
    if (QWidget* w = QApplication::activeModalWidget()) {
      ++seen;
      answer(w);
    }
  });
  timer.start();
  act();
  QApplication::processEvents();
  return seen;
}

bool waitForCurve(HistoryPage& page) {
  if (!page.curveLoading()) return true;
  QSignalSpy shown(&page, &HistoryPage::curveShown);
  return shown.wait(static_cast<int>(30000 * spillway::testing::kTimeScale));
}

TEST(HistoryPages, F2RenamesTheRunAndItsIdTellsTwoOfOneNameApart) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string first, second;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    first = addRun(**store, "shakespeare", RunStatus::kCompleted);
    second = addRun(**store, "shakespeare", RunStatus::kCompleted);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  // The same name, told apart by the Run column: each row shows its own id.
  ASSERT_TRUE(rowOf(page, first).isValid());
  ASSERT_TRUE(rowOf(page, second).isValid());
  EXPECT_EQ(rowOf(page, first).data().toString(), "shakespeare");
  EXPECT_EQ(rowOf(page, second).data().toString(), "shakespeare");
  EXPECT_EQ(rowOf(page, first, RunHistoryModel::kRunId).data().toString(), q(first));
  EXPECT_EQ(rowOf(page, second, RunHistoryModel::kRunId).data().toString(), q(second));
  EXPECT_EQ(model.headerData(RunHistoryModel::kRunId, Qt::Horizontal, Qt::DisplayRole), "Run");
  // Whole, not elided, after the rows are read and again after a refresh.
  model.refresh();
  ASSERT_TRUE(waitForHistory(&model));
  EXPECT_GE(page.table()->columnWidth(RunHistoryModel::kRunId),
            page.table()->fontMetrics().horizontalAdvance(q(second)));

  // F2 on the second run's row, and on its context menu.
  EXPECT_EQ(page.renameAction()->shortcut(), QKeySequence(Qt::Key_F2));
  EXPECT_TRUE(page.table()->actions().contains(page.renameAction()));
  page.table()->setCurrentIndex(rowOf(page, second));
  page.table()->setFocus();
  QApplication::setActiveWindow(&page);
  ASSERT_TRUE(QTest::qWaitForWindowActive(&page));
  QString label;
  const int dialogs = answeringDialogs(
      [&] {
        QTest::keyClick(page.table(), Qt::Key_F2);
        QTest::qWait(200);
      },
      [&](QWidget* w) {
        auto* dialog = qobject_cast<QInputDialog*>(w);
        ASSERT_NE(dialog, nullptr) << w->metaObject()->className();
        EXPECT_EQ(dialog->objectName(), "renameRunDialog");
        label = dialog->labelText();
        EXPECT_EQ(dialog->textValue(), "shakespeare");
        dialog->setTextValue("  shakespeare, lr 3e-4 ");
        dialog->accept();
      });
  EXPECT_EQ(dialogs, 1);
  EXPECT_TRUE(label.contains(q(second))) << label.toStdString();
  ASSERT_TRUE(waitForEdits(&model));
  // Written to runs.db, trimmed; the other run of the name keeps it.
  auto store = RunStore::open(db);
  ASSERT_TRUE(store.ok());
  EXPECT_EQ((*store)->get_run(second)->name, "shakespeare, lr 3e-4");
  EXPECT_EQ((*store)->get_run(first)->name, "shakespeare");
  EXPECT_EQ(rowOf(page, second).data().toString(), "shakespeare, lr 3e-4");
  EXPECT_EQ(rowOf(page, first).data().toString(), "shakespeare");

  // An empty name is refused with a message, and the run keeps its name.
  page.table()->setCurrentIndex(rowOf(page, first));
  QString refusal;
  answeringDialogs(
      [&] {
        page.renameAction()->trigger();
        QTest::qWait(100);
      },
      [&](QWidget* w) {
        if (auto* dialog = qobject_cast<QInputDialog*>(w)) {
          dialog->setTextValue("   ");
          return dialog->accept();
        }
        if (auto* box = qobject_cast<QMessageBox*>(w)) {
          refusal = box->text();
          box->accept();
        }
      });
  EXPECT_TRUE(refusal.contains("needs a name")) << refusal.toStdString();
  ASSERT_TRUE(waitForEdits(&model));
  EXPECT_EQ((*store)->get_run(first)->name, "shakespeare");
}

TEST(HistoryPages, AFailedRunSaysWhyItFailed) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string recorded, fromEvent, completed;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    RunInfo info;
    info.name = "out of memory";
    info.status = RunStatus::kFailed;
    info.error_message =
        "device memory exhausted: 2.00 GB asked, 1.20 GB free\nlower micro_batch_size";
    auto id = (*store)->create_run(info);
    ASSERT_TRUE(id.ok());
    recorded = *id;
    // A run whose row kept no message: its last error event says why.
    fromEvent = addRun(**store, "bad data", RunStatus::kFailed);
    ASSERT_TRUE((*store)
                    ->add_event(fromEvent, 1.0, "error",
                                R"({"type":"error","t":1,"code":"io","message":"cannot read )"
                                R"(/data/train.jsonl: No such file or directory"})")
                    .ok());
    completed = addRun(**store, "fine", RunStatus::kCompleted, {2.0});
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  auto cell = [&](const std::string& id, int role = Qt::DisplayRole) {
    return model.data(model.index(model.rowOfRun(q(id)), RunHistoryModel::kFailure), role)
        .toString();
  };
  EXPECT_EQ(model.headerData(RunHistoryModel::kFailure, Qt::Horizontal, Qt::DisplayRole),
            "Why it ended");
  EXPECT_EQ(cell(recorded), "device memory exhausted: 2.00 GB asked, 1.20 GB free");
  EXPECT_EQ(cell(recorded, Qt::ToolTipRole),
            "device memory exhausted: 2.00 GB asked, 1.20 GB free\nlower micro_batch_size");
  EXPECT_EQ(cell(fromEvent), "cannot read /data/train.jsonl: No such file or directory");
  EXPECT_EQ(cell(completed), "");
  // The status stays the status; its tooltip says why too.
  EXPECT_EQ(model.data(model.index(model.rowOfRun(q(recorded)), RunHistoryModel::kStatus),
                       Qt::DisplayRole),
            "failed");
  EXPECT_TRUE(
      model
          .data(model.index(model.rowOfRun(q(recorded)), RunHistoryModel::kStatus), Qt::ToolTipRole)
          .toString()
          .startsWith("device memory exhausted"));
}

TEST(HistoryPages, DeleteWithSeveralRowsSelectedDeletesThemAllAfterOneConfirmation) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db", runs = tmp.path() + "/runs";
  std::string a, b, c;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    a = addRun(**store, "first try", RunStatus::kFailed, {}, {}, runs);
    b = addRun(**store, "second try", RunStatus::kStopped, {3.0}, {}, runs);
    c = addRun(**store, "the keeper", RunStatus::kCompleted, {2.0}, {}, runs);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  auto* selection = page.table()->selectionModel();
  selection->setCurrentIndex(rowOf(page, a),
                             QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  selection->select(rowOf(page, b), QItemSelectionModel::Select | QItemSelectionModel::Rows);
  ASSERT_EQ(page.selectedRunIds().size(), 2);
  QPushButton* del = nullptr;
  for (QPushButton* p : page.findChildren<QPushButton*>())
    if (p->text() == "Delete") del = p;
  ASSERT_NE(del, nullptr);
  QString text;
  const int dialogs = answeringDialogs(
      [&] {
        QTest::mouseClick(del, Qt::LeftButton);
        QTest::qWait(100);
      },
      [&](QWidget* w) {
        auto* box = qobject_cast<QMessageBox*>(w);
        ASSERT_NE(box, nullptr);
        text = box->text();
        for (QAbstractButton* button : box->buttons())
          if (button->text() == "Delete") return button->click();
        box->reject();
      });
  EXPECT_EQ(dialogs, 1);
  // It lists both runs, by name and id, and not the one that stays.
  EXPECT_TRUE(text.contains("these 2 runs")) << text.toStdString();
  for (const std::string& id : {a, b}) EXPECT_TRUE(text.contains(q(id))) << text.toStdString();
  EXPECT_TRUE(text.contains("“first try”")) << text.toStdString();
  EXPECT_TRUE(text.contains("“second try”")) << text.toStdString();
  EXPECT_FALSE(text.contains("the keeper")) << text.toStdString();
  ASSERT_TRUE(waitForEdits(&model));
  auto store = RunStore::open(db);
  ASSERT_TRUE(store.ok());
  auto left = (*store)->list_runs();
  ASSERT_TRUE(left.ok());
  ASSERT_EQ(left->size(), 1u);
  EXPECT_EQ(left->front().id, c);
  EXPECT_FALSE(fs::exists(runs + "/" + a + "/job.json"));
  EXPECT_FALSE(fs::exists(runs + "/" + b + "/events.jsonl"));
  EXPECT_TRUE(fs::exists(runs + "/" + c + "/job.json"));
  EXPECT_EQ(model.rowCount(), 1);
}

TEST(HistoryPages, ShowsTheCurrentRunsLossCurve) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string a, b, none;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    a = addRun(**store, "falls", RunStatus::kCompleted, {3.0, 2.5, 2.25, 2.0},
               {{0, 3.5}, {4, 2.1}});
    b = addRun(**store, "flat", RunStatus::kStopped, {4.0, 4.0});
    none = addRun(**store, "failed at start", RunStatus::kFailed);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  QCustomPlot* plot = page.lossPlot();
  ASSERT_NE(plot, nullptr);
  EXPECT_TRUE(plot->isVisible());
  auto points = [&](int graph) {
    std::vector<std::pair<double, double>> out;
    for (auto it = plot->graph(graph)->data()->constBegin();
         it != plot->graph(graph)->data()->constEnd(); ++it)
      out.emplace_back(it->key, it->value);
    return out;
  };
  auto title = [&] {
    return qobject_cast<QCPTextElement*>(plot->plotLayout()->element(0, 0))->text();
  };
  EXPECT_EQ(title(), "Loss: select a run to see its curve");
  page.table()->setCurrentIndex(rowOf(page, a));
  ASSERT_TRUE(waitForCurve(page));
  EXPECT_EQ(title(), "Loss of “falls” · " + q(a));
  using P = std::vector<std::pair<double, double>>;
  EXPECT_EQ(points(0), (P{{1, 3.0}, {2, 2.5}, {3, 2.25}, {4, 2.0}}));
  EXPECT_EQ(points(1), (P{{0, 3.5}, {4, 2.1}}));
  page.table()->setCurrentIndex(rowOf(page, b));
  ASSERT_TRUE(waitForCurve(page));
  EXPECT_EQ(points(0), (P{{1, 4.0}, {2, 4.0}}));
  EXPECT_TRUE(points(1).empty());
  // A run without a step says so rather than drawing bare axes as if it had.
  page.table()->setCurrentIndex(rowOf(page, none));
  ASSERT_TRUE(waitForCurve(page));
  EXPECT_TRUE(points(0).empty());
  EXPECT_TRUE(title().endsWith("no loss recorded (the run trained no step)"))
      << title().toStdString();
}

TEST(ComparePicker, PicksRunsOfItsOwnAndSaysWhatToDoUntilThen) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  {  // No runs yet: the empty state says where runs come from; no axes.
    RunHistoryModel model;
    ASSERT_EQ(model.open(q(db)), "");
    ASSERT_TRUE(waitForHistory(&model));
    ComparePage page(&model);
    page.show();
    EXPECT_EQ(page.runPicker()->count(), 0);
    EXPECT_TRUE(page.emptyState()->isVisible());
    EXPECT_TRUE(page.emptyState()->text().contains("New run"))
        << page.emptyState()->text().toStdString();
    EXPECT_FALSE(page.lossPlot()->isVisible());
  }
  std::string a, b, c;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    a = addRun(**store, "lr 1e-3", RunStatus::kCompleted, {3.0, 2.0});
    b = addRun(**store, "lr 3e-4", RunStatus::kCompleted, {3.0, 2.5});
    c = addRun(**store, "lr 3e-4", RunStatus::kFailed, {3.1});
  }
  RunHistoryModel model;
  ComparePage page(&model);  // before the model has its runs, as the window builds it
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  QListWidget* picker = page.runPicker();
  ASSERT_EQ(picker->count(), 3);
  auto item = [&](const std::string& id) -> QListWidgetItem* {
    for (int r = 0; r < picker->count(); ++r)
      if (picker->item(r)->data(Qt::UserRole).toString() == q(id)) return picker->item(r);
    return nullptr;
  };
  ASSERT_NE(item(a), nullptr);
  // Two runs of one name are told apart by their ids' time and suffix.
  EXPECT_NE(item(b)->text(), item(c)->text());
  EXPECT_TRUE(item(c)->text().contains(q(c).mid(9))) << item(c)->text().toStdString();
  EXPECT_TRUE(page.emptyState()->isVisible());
  EXPECT_TRUE(page.emptyState()->text().contains("Tick two or more runs"));
  EXPECT_FALSE(page.lossPlot()->isVisible());

  item(a)->setCheckState(Qt::Checked);
  EXPECT_EQ(page.runs(), QStringList{q(a)});
  ASSERT_TRUE(waitForCompare(&page));
  EXPECT_TRUE(page.emptyState()->text().contains("one more"))
      << page.emptyState()->text().toStdString();
  EXPECT_TRUE(page.lossPlot()->isVisible());
  item(b)->setCheckState(Qt::Checked);
  EXPECT_EQ(page.runs(), (QStringList{q(a), q(b)}));
  ASSERT_TRUE(waitForCompare(&page));
  EXPECT_FALSE(page.emptyState()->isVisible());
  EXPECT_TRUE(page.lossPlot()->isVisible());
  ASSERT_EQ(page.lossPlot()->graphCount(), 2);  // a train loss each, no evals
  EXPECT_EQ(page.lossPlot()->graph(1)->data()->size(), 2);
  item(a)->setCheckState(Qt::Unchecked);
  EXPECT_EQ(page.runs(), QStringList{q(b)});

  // History's Compare ticks the runs it sends.
  page.setRuns({q(a), q(c)});
  ASSERT_TRUE(waitForCompare(&page));
  EXPECT_EQ(item(a)->checkState(), Qt::Checked);
  EXPECT_EQ(item(b)->checkState(), Qt::Unchecked);
  EXPECT_EQ(item(c)->checkState(), Qt::Checked);
  // A refresh of the runs keeps the ticks.
  model.refresh();
  ASSERT_TRUE(waitForHistory(&model));
  ASSERT_EQ(picker->count(), 3);
  EXPECT_EQ(item(a)->checkState(), Qt::Checked);
  EXPECT_EQ(item(c)->checkState(), Qt::Checked);
}

}  // namespace
}  // namespace spillway::ui

#include "HistoryPage.h"

#include <qcustomplot.h>

#include <QAction>
#include <QDesktopServices>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSaveFile>
#include <QSortFilterProxyModel>
#include <QSplitter>
#include <QTableView>
#include <QUrl>
#include <QVBoxLayout>

#include "Charts.h"
#include "Format.h"
#include "PoolTask.h"
#include "RunEditQueue.h"
#include "RunHistoryModel.h"
#include "RunLauncher.h"
#include "WorkerClient.h"
#include "history/owned-files.h"
#include "history/run-folder.h"

namespace spillway::ui {
namespace {

QString folderKey(const std::string& dir) {
  if (dir.empty()) return {};
  const QFileInfo fi(QString::fromStdString(dir));
  const QString canonical = fi.canonicalFilePath();
  return canonical.isEmpty() ? QDir::cleanPath(fi.absoluteFilePath()) : canonical;
}

// The same folder, or one inside the other.
bool overlaps(const QString& a, const QString& b) {
  if (a.isEmpty() || b.isEmpty()) return false;
  return a == b || a.startsWith(b + '/') || b.startsWith(a + '/');
}

}  // namespace

HistoryPage::HistoryPage(RunHistoryModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(buildFilter());
  auto* split = new QSplitter(Qt::Vertical);
  split->addWidget(buildTable());
  split->addWidget(buildCurve());
  split->setStretchFactor(0, 1);
  split->setStretchFactor(1, 1);
  split->setChildrenCollapsible(false);
  layout->addWidget(split, 1);
  layout->addWidget(buildEditStatus());
  layout->addLayout(buildButtons());
  buildContextMenu();
  connect(table_->selectionModel(), &QItemSelectionModel::currentChanged, this,
          &HistoryPage::updateDeleteButton);
  connect(table_->selectionModel(), &QItemSelectionModel::currentChanged, this,
          &HistoryPage::showCurve);
  // After restoreSelection(), which buildTable() connected first.
  connect(proxy_, &QAbstractItemModel::modelReset, this, &HistoryPage::updateDeleteButton);
  connect(proxy_, &QAbstractItemModel::modelReset, this, &HistoryPage::showCurve);
  showEdits();
}

QLineEdit* HistoryPage::buildFilter() {
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("Filter by name, model, dataset, status or tag…"));
  filter_->setClearButtonEnabled(true);
  connect(filter_, &QLineEdit::textChanged, this, &HistoryPage::setFilter);
  return filter_;
}

QTableView* HistoryPage::buildTable() {
  proxy_ = new QSortFilterProxyModel(this);
  // Before the proxy listens: the selection is read while the proxy still maps the old rows.
  connect(model_, &QAbstractItemModel::modelAboutToBeReset, this, &HistoryPage::rememberSelection);
  proxy_->setSourceModel(model_);
  proxy_->setSortRole(Qt::UserRole);
  proxy_->setFilterCaseSensitivity(Qt::CaseInsensitive);
  proxy_->setFilterKeyColumn(-1);
  table_ = new QTableView;
  table_->setModel(proxy_);
  table_->setSortingEnabled(true);
  table_->sortByColumn(RunHistoryModel::kStart, Qt::DescendingOrder);
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->horizontalHeader()->setStretchLastSection(true);
  // A run id whole ("20250131-142501-3fa9c2"): it is what tells two runs of one name apart.
  table_->setColumnWidth(RunHistoryModel::kRunId,
                         table_->fontMetrics().horizontalAdvance("20250131-142501-3fa9c2") + 16);
  table_->verticalHeader()->hide();
  // After the view's selection model has cleared itself on the reset.
  connect(proxy_, &QAbstractItemModel::modelReset, this, &HistoryPage::restoreSelection);
  connect(table_, &QTableView::doubleClicked, this, &HistoryPage::openCurrentInLive);
  return table_;
}

QLabel* HistoryPage::buildEditStatus() {
  editStatus_ = new QLabel;
  editStatus_->setObjectName("historyEditStatus");
  editStatus_->setWordWrap(true);
  editStatus_->hide();
  return editStatus_;
}

QCustomPlot* HistoryPage::buildCurve() {
  curve_ = titledPlot(tr("Loss: select a run to see its curve"), tr("step"), tr("loss"), 2, 170);
  curve_->setObjectName("historyLossCurve");
  curve_->setMinimumWidth(200);
  auto* train = curve_->addGraph();
  train->setName(tr("train loss"));
  train->setPen(QPen(QColor(31, 119, 180), 1.5));
  auto* eval = curve_->addGraph();
  eval->setName(tr("eval loss"));
  eval->setPen(QPen(QColor(214, 39, 40), 1.5, Qt::DashLine));
  eval->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6));
  return curve_;
}

void HistoryPage::showCurve() {
  const RunRow* r = currentRun();
  const QString key = r ? QString("%1/%2/%3/%4")
                              .arg(QString::fromStdString(r->info.id))
                              .arg(static_cast<int>(r->info.status))
                              .arg(r->info.final_step.value_or(-1))
                              .arg(QString::fromStdString(r->info.name))
                        : QString();
  // A running run's steps come in with each refresh: its curve is read again then.
  const bool running = r && r->info.status == RunStatus::kRunning;
  if (key == curveKey_ && !running) return;
  curveKey_ = key;
  const quint64 generation = ++curveGeneration_;
  auto* title = qobject_cast<QCPTextElement*>(curve_->plotLayout()->element(0, 0));
  const std::string path = model_->databasePath();
  if (!r || path.empty()) {
    for (int g = 0; g < 2; ++g) curve_->graph(g)->data()->clear();
    if (title) title->setText(tr("Loss: select a run to see its curve"));
    curve_->replot(QCustomPlot::rpQueuedReplot);
    curveLoading_ = false;
    return void(emit curveShown());
  }
  const QString heading =
      tr("Loss of “%1” · %2")
          .arg(QString::fromStdString(r->info.name), QString::fromStdString(r->info.id));
  if (title) title->setText(heading);
  curveLoading_ = true;
  struct Curve {
    QVector<double> step, loss, evalStep, evalLoss;
  };
  runOnPool(
      this,
      [path, id = r->info.id] {
        Curve c;
        auto store = RunStore::open(path, RunHistoryModel::connectionOptions());
        if (!store.ok()) return c;
        if (auto m = (*store)->metrics(id); m.ok())
          for (const MetricRow& row : *m)
            if (row.loss) c.step << static_cast<double>(row.step), c.loss << *row.loss;
        if (auto e = (*store)->evals(id); e.ok())
          for (const EvalRow& row : *e)
            if (row.loss) c.evalStep << static_cast<double>(row.step), c.evalLoss << *row.loss;
        return c;
      },
      [this, generation, heading](Curve c) {
        if (generation != curveGeneration_) return;  // another run is current now
        curveLoading_ = false;
        if (auto* t = qobject_cast<QCPTextElement*>(curve_->plotLayout()->element(0, 0)))
          t->setText(c.loss.isEmpty() && c.evalLoss.isEmpty()
                         ? heading + tr(": no loss recorded (the run trained no step)")
                         : heading);
        curve_->graph(0)->setData(c.step, c.loss, /*alreadySorted=*/true);
        curve_->graph(1)->setData(c.evalStep, c.evalLoss, /*alreadySorted=*/true);
        curve_->rescaleAxes();
        curve_->replot(QCustomPlot::rpQueuedReplot);
        emit curveShown();
      });
}

QVBoxLayout* HistoryPage::buildButtons() {
  auto* rows = new QVBoxLayout;
  auto* buttons = new QHBoxLayout;
  rows->addLayout(buttons);
  auto add = [&](const QString& text, const QString& tip) {
    auto* b = new QPushButton(text);
    b->setToolTip(tip);
    buttons->addWidget(b);
    return b;
  };
  auto clicked = &QPushButton::clicked;
  connect(add(tr("Refresh"), tr("Re-read the run store")), clicked, model_,
          &RunHistoryModel::refresh);
  connect(add(tr("Open in Live"), tr("Show the run's charts (live when it is still running)")),
          clicked, this, &HistoryPage::openCurrentInLive);
  connect(add(tr("Compare"), tr("Compare the selected runs")), clicked, this,
          [this] { emit compareRuns(selectedRunIds()); });
  connect(add(tr("Try it"), tr("Prompt the run's fine-tuned model and its base side by side, "
                               "or export it")),
          clicked, this, [this] {
            if (const RunRow* r = currentRun()) emit tryRun(QString::fromStdString(r->info.id));
          });
  connect(add(tr("Resume"), tr("Continue from the run's latest checkpoint")), clicked, this,
          &HistoryPage::resumeCurrent);
  connect(add(tr("Clone"), tr("A new run with the same settings")), clicked, this, [this] {
    if (const RunRow* r = currentRun()) emit cloneRun(QString::fromStdString(r->info.job_json));
  });
  buttons->addStretch();
  // The second row: what edits the run.
  buttons = new QHBoxLayout;
  rows->addLayout(buttons);
  connect(add(tr("Rename…"), tr("Give the run another name (F2)")), clicked, this,
          &HistoryPage::renameCurrent);
  connect(add(tr("Tags…"), tr("Comma-separated tags")), clicked, this, &HistoryPage::editTags);
  connect(add(tr("Notes…"), tr("Free-text notes")), clicked, this, &HistoryPage::editNotes);
  connect(add(tr("Open folder"), tr("Open the run folder")), clicked, this,
          &HistoryPage::openFolder);
  deleteButton_ = add(tr("Delete"), tr("Delete the selected runs and their files"));
  connect(deleteButton_, clicked, this, &HistoryPage::deleteSelected);
  buttons->addStretch();
  return rows;
}

void HistoryPage::buildContextMenu() {
  table_->setContextMenuPolicy(Qt::ActionsContextMenu);
  auto add = [this](const QString& text, const QKeySequence& keys = {}) {
    auto* a = new QAction(text, table_);
    a->setShortcut(keys);
    a->setShortcutContext(Qt::WidgetWithChildrenShortcut);
    table_->addAction(a);
    return a;
  };
  connect(add(tr("Open in Live")), &QAction::triggered, this, &HistoryPage::openCurrentInLive);
  connect(add(tr("Compare")), &QAction::triggered, this,
          [this] { emit compareRuns(selectedRunIds()); });
  connect(add(tr("Try it")), &QAction::triggered, this, [this] {
    if (const RunRow* r = currentRun()) emit tryRun(QString::fromStdString(r->info.id));
  });
  renameAction_ = add(tr("Rename…"), QKeySequence(Qt::Key_F2));
  connect(renameAction_, &QAction::triggered, this, &HistoryPage::renameCurrent);
  connect(add(tr("Tags…")), &QAction::triggered, this, &HistoryPage::editTags);
  connect(add(tr("Notes…")), &QAction::triggered, this, &HistoryPage::editNotes);
  connect(add(tr("Open folder")), &QAction::triggered, this, &HistoryPage::openFolder);
  connect(add(tr("Resume")), &QAction::triggered, this, &HistoryPage::resumeCurrent);
  connect(add(tr("Clone")), &QAction::triggered, this, [this] {
    if (const RunRow* r = currentRun()) emit cloneRun(QString::fromStdString(r->info.job_json));
  });
  deleteAction_ = add(tr("Delete"), QKeySequence(QKeySequence::Delete));
  connect(deleteAction_, &QAction::triggered, this, &HistoryPage::deleteSelected);
}

const RunRow* HistoryPage::currentRun() const {
  const QModelIndex i = table_->currentIndex();
  if (!i.isValid()) return nullptr;
  return &model_->run(proxy_->mapToSource(i).row());
}

void HistoryPage::openCurrentInLive() {
  if (const RunRow* r = currentRun()) emit openLive(QString::fromStdString(r->info.run_dir));
}

namespace {

// A run as its dialogs name it: its name and its id, which tells two runs of one name apart
// ("\"shakespeare\" (20250131-142501-3fa9c2)").
QString runTitle(const RunInfo& run) {
  return QString("\"%1\" (%2)")
      .arg(QString::fromStdString(run.name), QString::fromStdString(run.id));
}

}  // namespace

// The dialogs copy the run first: History's read can end while one is open, and its model reset
// replaces the rows (a pointer into them would dangle).
void HistoryPage::editTags() {
  if (!currentRun()) return;
  const RunInfo run = currentRun()->info;
  QStringList old;
  for (const auto& t : run.tags) old << QString::fromStdString(t);
  bool ok = false;
  const QString text = QInputDialog::getText(this, tr("Tags of %1").arg(runTitle(run)),
                                             tr("Tags of %1, comma-separated:").arg(runTitle(run)),
                                             QLineEdit::Normal, old.join(", "), &ok);
  if (!ok) return;
  std::vector<std::string> list;
  for (const QString& t : text.split(',', Qt::SkipEmptyParts))
    list.push_back(t.trimmed().toStdString());
  model_->edits()->submit(RunEdit::setTags(run.id, QString::fromStdString(run.name), list));
}

void HistoryPage::editNotes() {
  if (!currentRun()) return;
  const RunInfo run = currentRun()->info;
  bool ok = false;
  const QString text = QInputDialog::getMultiLineText(this, tr("Notes on %1").arg(runTitle(run)),
                                                      tr("Notes on %1:").arg(runTitle(run)),
                                                      QString::fromStdString(run.notes), &ok);
  if (!ok) return;
  model_->edits()->submit(
      RunEdit::setNotes(run.id, QString::fromStdString(run.name), text.toStdString()));
}

void HistoryPage::renameCurrent() {
  if (!currentRun()) return;
  const RunInfo run = currentRun()->info;
  const QString old = QString::fromStdString(run.name);
  QInputDialog dialog(this);
  dialog.setObjectName("renameRunDialog");
  dialog.setWindowTitle(tr("Rename run"));
  dialog.setLabelText(tr("New name of “%1” (%2):").arg(old, QString::fromStdString(run.id)));
  dialog.setTextValue(old);
  if (dialog.exec() != QDialog::Accepted) return;
  const QString name = dialog.textValue().trimmed();
  if (name.isEmpty())
    return void(QMessageBox::warning(this, tr("Rename run"),
                                     tr("A run needs a name; “%1” keeps its own.").arg(old)));
  if (name == old) return;
  model_->edits()->submit(RunEdit::rename(run.id, old, name.toStdString()));
}

void HistoryPage::openFolder() {
  const RunRow* r = currentRun();
  if (!r) return;
  const QString dir = QString::fromStdString(r->info.run_dir);
  if (!QFileInfo(dir).isDir())
    return void(QMessageBox::warning(
        this, tr("Open folder"),
        tr("The run's folder %1 is not there any more (moved or deleted).").arg(dir)));
  // On Linux this runs xdg-open (the package recommends xdg-utils); where nothing opens
  // folders it fails without a word, so say where the folder is.
  if (!QDesktopServices::openUrl(QUrl::fromLocalFile(dir)))
    QMessageBox::warning(this, tr("Open folder"),
                         tr("No program here opens folders (xdg-open, from the package "
                            "xdg-utils, is what Spillway asks). The run's folder is %1")
                             .arg(dir));
}

void HistoryPage::resumeCurrent() {
  const RunRow* r = currentRun();
  if (!r) return;
  if (r->info.status == RunStatus::kRunning && r->info.pid && WorkerClient::alive(*r->info.pid))
    return void(QMessageBox::information(this, tr("Resume"), tr("This run is still going.")));
  const auto ckpts = list_run_checkpoints(r->info.run_dir);
  if (ckpts.empty())
    return void(QMessageBox::information(this, tr("Resume"), tr("This run has no checkpoint.")));
  const QString runDir = QString::fromStdString(r->info.run_dir);
  QString error;
  // The same run goes on: its row, its folder, its tags and notes (the worker takes it up by id).
  const qint64 pid =
      WorkerClient::launch(runDir + "/job.json", QString::fromStdString(ckpts.back()), &error,
                           QString::fromStdString(r->info.id));
  if (pid < 0) return void(QMessageBox::warning(this, tr("Resume"), error));
  emit resumed(runDir, pid);
}

void HistoryPage::deleteSelected() {
  QStringList ids = selectedRunIds();
  if (const RunRow* r = currentRun(); ids.isEmpty() && r) ids << QString::fromStdString(r->info.id);
  ids.removeIf([this](const QString& id) { return deleting_.contains(id); });  // going already
  QStringList going, refused;
  QVector<DeletePlan> plans;
  for (const QString& id : ids) {
    DeletePlan plan = planDelete(model_, id);
    if (!plan.error.isEmpty()) {
      refused << plan.error;
      continue;
    }
    going << id;
    plans << std::move(plan);
  }
  if (going.isEmpty()) {
    if (!refused.isEmpty()) QMessageBox::warning(this, tr("Delete run"), refused.join('\n'));
    return;
  }
  QString text;
  if (going.size() == 1 && refused.isEmpty()) {
    text = describe(plans.first());
  } else {
    // One line a run: its name and id (two runs of one name), and what of its files goes.
    qint64 bytes = 0;
    QStringList lines;
    for (int k = 0; k < plans.size(); ++k) {
      const DeletePlan& p = plans[k];
      QString files;
      if (!p.sharedBy.isEmpty()) {
        files = tr(": its folder stays, %1 uses it too").arg(p.sharedBy.join(tr(", ")));
      } else if (!p.files.isEmpty()) {
        files = tr(": %1 of files").arg(formatBytes(static_cast<double>(p.bytes)));
        bytes += p.bytes;
      }
      lines << tr("• “%1” (%2)%3").arg(p.runName, going[k], files);
    }
    text = tr("Delete these %1 runs from History (their metrics, samples and events) and their "
              "files, %2 in all?\n\n%3\n\nFiles in their folders that are not the runs' stay.")
               .arg(going.size())
               .arg(formatBytes(static_cast<double>(bytes)), lines.join('\n'));
    if (!refused.isEmpty()) text += tr("\n\nNot deleted: %1").arg(refused.join(' '));
  }
  QMessageBox box(QMessageBox::Question, tr("Delete run"), text,
                  QMessageBox::Yes | QMessageBox::Cancel, this);
  box.setObjectName("deleteRunConfirmation");
  box.setDefaultButton(QMessageBox::Cancel);
  box.button(QMessageBox::Yes)->setText(tr("Delete"));
  if (box.exec() != QMessageBox::Yes) return;
  QStringList errors;
  for (const QString& id : going)
    if (const QString err = deleteRun(model_, id); !err.isEmpty()) errors << err;
  if (!errors.isEmpty()) QMessageBox::warning(this, tr("Delete run"), errors.join('\n'));
}

void HistoryPage::updateDeleteButton() {
  const QModelIndex i = table_->currentIndex();
  const bool going =
      i.isValid() &&
      deleting_.contains(QString::fromStdString(model_->run(proxy_->mapToSource(i).row()).info.id));
  deleteButton_->setEnabled(!going);
  deleteButton_->setToolTip(going ? tr("This run is being deleted")
                                  : tr("Delete the run and its files"));
}

void HistoryPage::showEdits() {
  RunEditQueue* edits = model_->edits();
  // A run whose deletion is queued is not deleted again: Delete is off on its row until the row
  // goes (or the store refuses the deletion, and it can be tried again).
  connect(edits, &RunEditQueue::queued, this, [this](const RunEdit& e) {
    if (e.kind != RunEdit::kDelete) return;
    deleting_.insert(QString::fromStdString(e.runId));
    updateDeleteButton();
  });
  connect(edits, &RunEditQueue::started, this, [this](const RunEdit& e) {
    if (model_->edits()->waitingForLock()) return;  // the waiting line stays until it lands
    editStatus_->setStyleSheet(QString());
    editStatus_->setText(tr("Saving %1…").arg(e.what()));
    editStatus_->show();
  });
  connect(
      edits, &RunEditQueue::waiting, this,
      [this](const RunEdit& e, const QString& message, int retryMs) {
        editStatus_->setStyleSheet("color:#b45309");  // amber: kept, not lost
        editStatus_->setText(tr("Waiting to save %1: %2. The edit is kept and tried again in %3 s.")
                                 .arg(e.what(), message)
                                 .arg(retryMs / 1000.0, 0, 'g', 2));
        editStatus_->show();
      });
  connect(edits, &RunEditQueue::written, this, [this](const RunEdit& e, const QString& error) {
    if (e.kind == RunEdit::kDelete && !error.isEmpty()) {
      deleting_.remove(QString::fromStdString(e.runId));
      updateDeleteButton();
    }
    if (error.isEmpty() && !e.kept.isEmpty()) {
      // Said, not only shown in the confirmation: what was found when the files went.
      QStringList kept;
      for (const QString& k : e.kept) kept << QDir::toNativeSeparators(k);
      editStatus_->setStyleSheet(QString());
      editStatus_->setText(
          tr("Saved %1. Kept what Spillway did not write: %2.").arg(e.what(), kept.join(tr(", "))));
    } else if (error.isEmpty()) {
      editStatus_->setStyleSheet(QString());
      editStatus_->setText(tr("Saved %1.").arg(e.what()));
    } else {
      editStatus_->setStyleSheet("color:#d32f2f");
      editStatus_->setText(tr("Could not save %1: %2").arg(e.what(), error));
      if (e.kind == RunEdit::kDelete) QMessageBox::warning(this, tr("Delete run"), error);
    }
    editStatus_->show();
  });
}

void HistoryPage::setFilter(const QString& text) {
  proxy_->setFilterFixedString(text);
}

void HistoryPage::rememberSelection() {
  keepSelected_ = selectedRunIds();
  const QModelIndex c = table_->currentIndex();
  keepCurrent_ = c.isValid()
                     ? QString::fromStdString(model_->run(proxy_->mapToSource(c).row()).info.id)
                     : QString();
}

void HistoryPage::restoreSelection() {
  auto at = [this](const QString& id) {
    const int row = model_->rowOfRun(id);
    return row < 0 ? QModelIndex() : proxy_->mapFromSource(model_->index(row, 0));
  };
  QItemSelection selection;
  for (const QString& id : keepSelected_) {
    if (const QModelIndex i = at(id); i.isValid()) selection.select(i, i);
  }
  table_->selectionModel()->select(selection,
                                   QItemSelectionModel::ClearAndSelect | QItemSelectionModel::Rows);
  if (const QModelIndex c = at(keepCurrent_); c.isValid())
    table_->selectionModel()->setCurrentIndex(c, QItemSelectionModel::NoUpdate);
}

QStringList HistoryPage::selectedRunIds() const {
  QStringList ids;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows())
    ids << QString::fromStdString(model_->run(proxy_->mapToSource(i).row()).info.id);
  return ids;
}

HistoryPage::DeletePlan HistoryPage::planDelete(RunHistoryModel* model, const QString& runId) {
  DeletePlan plan;
  const int row = model->rowOfRun(runId);
  if (row < 0) {
    plan.error = tr("No run %1").arg(runId);
    return plan;
  }
  const RunInfo& info = model->run(row).info;
  plan.runName = QString::fromStdString(info.name);
  plan.runDir = QString::fromStdString(info.run_dir);
  if (info.status == RunStatus::kRunning && info.pid && WorkerClient::alive(*info.pid)) {
    plan.error = tr("\"%1\" is still running; stop it first.").arg(plan.runName);
    return plan;
  }
  const QString folder = folderKey(info.run_dir);
  for (int r = 0; r < model->rowCount(); ++r) {
    const RunInfo& other = model->run(r).info;
    if (other.id == info.id || !overlaps(folder, folderKey(other.run_dir))) continue;
    const bool live =
        other.status == RunStatus::kRunning && other.pid && WorkerClient::alive(*other.pid);
    plan.sharedBy << (live ? tr("\"%1\" (running, its worker pid %2 writes there)")
                                 .arg(QString::fromStdString(other.name))
                                 .arg(*other.pid)
                           : tr("\"%1\" (%2)")
                                 .arg(QString::fromStdString(other.name),
                                      QString::fromLatin1(run_status_name(other.status))));
  }
  const QDir dir(folder);
  plan.folderExists = !folder.isEmpty() && dir.exists();
  if (!plan.folderExists) return plan;
  // Only what Spillway wrote goes (history/owned-files.h); `files` names the folder's entries
  // that hold some of it, `kept` each entry that is not Spillway's, wherever it is.
  const OwnedFiles scan = scan_run_folder(folder.toStdString());
  for (const std::string& f : scan.owned) {
    const QString top =
        folder + '/' + dir.relativeFilePath(QString::fromStdString(f)).section('/', 0, 0);
    if (!plan.files.contains(top)) plan.files << top;
  }
  plan.files.sort();
  for (const std::string& f : scan.foreign) plan.kept << QString::fromStdString(f);
  plan.bytes = static_cast<qint64>(scan.bytes);
  plan.checkpoints = static_cast<int>(list_run_checkpoints(folder.toStdString()).size());
  return plan;
}

QString HistoryPage::describe(const DeletePlan& plan) {
  QString text =
      tr("Delete the run \"%1\" from History (its metrics, samples and events)?").arg(plan.runName);
  if (!plan.sharedBy.isEmpty()) {
    text += tr("\n\nIts folder %1 stays, and nothing in it is removed: it is also the folder of "
               "%2.")
                .arg(plan.runDir, plan.sharedBy.join(tr(", ")));
    return text;
  }
  if (plan.files.isEmpty()) {
    if (plan.folderExists)
      text += plan.kept.isEmpty()
                  ? tr("\n\nIts folder %1 is empty and goes.").arg(plan.runDir)
                  : tr("\n\nIts folder %1 holds none of its files and stays.").arg(plan.runDir);
    return text;
  }
  QStringList names;
  for (const QString& f : plan.files) {
    const QString name = QFileInfo(f).fileName();
    names << (name == "checkpoints"
                  ? (plan.checkpoints == 1 ? tr("1 checkpoint")
                                           : tr("%1 checkpoints").arg(plan.checkpoints))
              : name == "export" ? tr("the exported model")
                                 : name);
  }
  text += tr("\n\nThese files go, %1 in all: %2, in %3.")
              .arg(formatBytes(static_cast<double>(plan.bytes)), names.join(tr(", ")), plan.runDir);
  if (!plan.kept.isEmpty()) {
    QStringList kept;
    for (const QString& k : plan.kept) kept << QDir(plan.runDir).relativeFilePath(k);
    text += tr("\n\nThe folder stays with what is not the run's: %1.").arg(kept.join(tr(", ")));
  }
  return text;
}

QString HistoryPage::deleteRun(RunHistoryModel* model, const QString& runId) {
  if (model->edits()->deleting(runId.toStdString())) return {};  // queued once is enough
  const DeletePlan plan = planDelete(model, runId);
  if (!plan.error.isEmpty()) return plan.error;
  RunEdit edit;
  edit.kind = RunEdit::kDelete;
  edit.runId = runId.toStdString();
  edit.runName = plan.runName;
  if (plan.sharedBy.isEmpty() && plan.folderExists)
    edit.removeRunDir = folderKey(plan.runDir.toStdString());
  edit.jobsDir = RunLauncher::dataHome() + "/jobs";
  model->edits()->submit(std::move(edit));
  return {};
}

}  // namespace spillway::ui

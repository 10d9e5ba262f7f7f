#include "HistoryPage.h"

#include <QDesktopServices>
#include <QDir>
#include <QDirIterator>
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
#include <QTableView>
#include <QUrl>
#include <QVBoxLayout>

#include "Format.h"
#include "RunEditQueue.h"
#include "RunHistoryModel.h"
#include "WorkerClient.h"
#include "history/run-folder.h"

namespace spillway::ui {
namespace {

// What a worker writes into its run folder (engine/train, app/worker): the entries Delete removes.
const QStringList kRunEntries = {"job.json", "events.jsonl", "checkpoints",
                                 "export",   "worker.out",   "worker.err"};

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

qint64 sizeOf(const QString& path) {
  const QFileInfo fi(path);
  if (!fi.isDir() || fi.isSymLink()) return fi.size();
  qint64 bytes = 0;
  QDirIterator it(path, QDir::Files | QDir::Hidden | QDir::System, QDirIterator::Subdirectories);
  while (it.hasNext()) bytes += QFileInfo(it.next()).size();
  return bytes;
}

}  // namespace

HistoryPage::HistoryPage(RunHistoryModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  auto* layout = new QVBoxLayout(this);
  layout->addWidget(buildFilter());
  layout->addWidget(buildTable(), 1);
  layout->addWidget(buildEditStatus());
  layout->addLayout(buildButtons());
  connect(table_->selectionModel(), &QItemSelectionModel::currentChanged, this,
          &HistoryPage::updateDeleteButton);
  // After restoreSelection(), which buildTable() connected first.
  connect(proxy_, &QAbstractItemModel::modelReset, this, &HistoryPage::updateDeleteButton);
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

QHBoxLayout* HistoryPage::buildButtons() {
  auto* buttons = new QHBoxLayout;
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
  connect(add(tr("Tags…"), tr("Comma-separated tags")), clicked, this, &HistoryPage::editTags);
  connect(add(tr("Notes…"), tr("Free-text notes")), clicked, this, &HistoryPage::editNotes);
  connect(add(tr("Open folder"), tr("Open the run folder")), clicked, this,
          &HistoryPage::openFolder);
  connect(add(tr("Resume"), tr("Continue from the run's latest checkpoint")), clicked, this,
          &HistoryPage::resumeCurrent);
  connect(add(tr("Clone"), tr("A new run with the same settings")), clicked, this, [this] {
    if (const RunRow* r = currentRun()) emit cloneRun(QString::fromStdString(r->info.job_json));
  });
  deleteButton_ = add(tr("Delete"), tr("Delete the run and its files"));
  connect(deleteButton_, clicked, this, &HistoryPage::deleteCurrent);
  buttons->addStretch();
  return buttons;
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

void HistoryPage::deleteCurrent() {
  const RunRow* r = currentRun();
  if (!r) return;
  const QString id = QString::fromStdString(r->info.id);
  if (deleting_.contains(id)) return;  // its deletion is queued, or written and the row going
  const DeletePlan plan = planDelete(model_, id);
  if (!plan.error.isEmpty()) return void(QMessageBox::warning(this, tr("Delete run"), plan.error));
  QMessageBox box(QMessageBox::Question, tr("Delete run"), describe(plan),
                  QMessageBox::Yes | QMessageBox::Cancel, this);
  box.setObjectName("deleteRunConfirmation");
  box.setDefaultButton(QMessageBox::Cancel);
  box.button(QMessageBox::Yes)->setText(tr("Delete"));
  if (box.exec() != QMessageBox::Yes) return;
  const QString err = deleteRun(model_, id);
  if (!err.isEmpty()) QMessageBox::warning(this, tr("Delete run"), err);
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
    if (error.isEmpty()) {
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
  for (const QFileInfo& e : dir.entryInfoList(
           QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot, QDir::Name)) {
    if (!kRunEntries.contains(e.fileName())) {
      plan.kept << e.absoluteFilePath();
      continue;
    }
    plan.files << e.absoluteFilePath();
    plan.bytes += sizeOf(e.absoluteFilePath());
    if (e.fileName() == "checkpoints")
      plan.checkpoints =
          QDir(e.absoluteFilePath()).entryList(QDir::Dirs | QDir::NoDotAndDotDot).size();
  }
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
    for (const QString& k : plan.kept) kept << QFileInfo(k).fileName();
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
  if (plan.sharedBy.isEmpty()) {
    edit.removeFiles = plan.files;
    if (plan.kept.isEmpty() && !plan.runDir.isEmpty())
      edit.removeFolder = folderKey(plan.runDir.toStdString());
  }
  model->edits()->submit(std::move(edit));
  return {};
}

}  // namespace spillway::ui

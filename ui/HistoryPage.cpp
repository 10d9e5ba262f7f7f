#include "HistoryPage.h"

#include <QDesktopServices>
#include <QDir>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QInputDialog>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QSaveFile>
#include <QSortFilterProxyModel>
#include <QTableView>
#include <QUrl>
#include <QVBoxLayout>

#include "RunHistoryModel.h"
#include "WorkerClient.h"
#include "history/run-folder.h"

namespace spillway::ui {

HistoryPage::HistoryPage(RunHistoryModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  auto* layout = new QVBoxLayout(this);
  filter_ = new QLineEdit;
  filter_->setPlaceholderText(tr("Filter by name, model, dataset, status or tag…"));
  filter_->setClearButtonEnabled(true);
  layout->addWidget(filter_);
  proxy_ = new QSortFilterProxyModel(this);
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
  layout->addWidget(table_, 1);
  connect(filter_, &QLineEdit::textChanged, this, &HistoryPage::setFilter);

  auto* buttons = new QHBoxLayout;
  auto add = [&](const QString& text, const QString& tip) {
    auto* b = new QPushButton(text);
    b->setToolTip(tip);
    buttons->addWidget(b);
    return b;
  };
  auto* refresh = add(tr("Refresh"), tr("Re-read the run store"));
  auto* live = add(tr("Open in Live"), tr("Show the run's charts (live when it is still running)"));
  auto* compare = add(tr("Compare"), tr("Compare the selected runs"));
  auto* tags = add(tr("Tags…"), tr("Comma-separated tags"));
  auto* notes = add(tr("Notes…"), tr("Free-text notes"));
  auto* folder = add(tr("Open folder"), tr("Open the run folder"));
  auto* resume = add(tr("Resume"), tr("Continue from the run's latest checkpoint"));
  auto* clone = add(tr("Clone"), tr("A new run with the same settings"));
  auto* del = add(tr("Delete"), tr("Delete the run and its files"));
  buttons->addStretch();
  layout->addLayout(buttons);

  auto current = [this]() -> const RunRow* {
    const QModelIndex i = table_->currentIndex();
    if (!i.isValid()) return nullptr;
    return &model_->run(proxy_->mapToSource(i).row());
  };
  connect(refresh, &QPushButton::clicked, model_, &RunHistoryModel::refresh);
  connect(table_, &QTableView::doubleClicked, this, [this, current] {
    if (const RunRow* r = current()) emit openLive(QString::fromStdString(r->info.run_dir));
  });
  connect(live, &QPushButton::clicked, this, [this, current] {
    if (const RunRow* r = current()) emit openLive(QString::fromStdString(r->info.run_dir));
  });
  connect(compare, &QPushButton::clicked, this, [this] { emit compareRuns(selectedRunIds()); });
  connect(tags, &QPushButton::clicked, this, [this, current] {
    const RunRow* r = current();
    if (!r) return;
    QStringList old;
    for (const auto& t : r->info.tags) old << QString::fromStdString(t);
    bool ok = false;
    const QString text = QInputDialog::getText(this, tr("Tags"), tr("Tags (comma-separated):"),
                                               QLineEdit::Normal, old.join(", "), &ok);
    if (!ok) return;
    std::vector<std::string> list;
    for (const QString& t : text.split(',', Qt::SkipEmptyParts))
      list.push_back(t.trimmed().toStdString());
    (void)model_->store()->set_tags(r->info.id, list);
    model_->refresh();
  });
  connect(notes, &QPushButton::clicked, this, [this, current] {
    const RunRow* r = current();
    if (!r) return;
    bool ok = false;
    const QString text = QInputDialog::getMultiLineText(this, tr("Notes"), tr("Notes:"),
                                                        QString::fromStdString(r->info.notes), &ok);
    if (!ok) return;
    (void)model_->store()->set_notes(r->info.id, text.toStdString());
    model_->refresh();
  });
  connect(folder, &QPushButton::clicked, this, [current] {
    if (const RunRow* r = current())
      QDesktopServices::openUrl(QUrl::fromLocalFile(QString::fromStdString(r->info.run_dir)));
  });
  connect(clone, &QPushButton::clicked, this, [this, current] {
    if (const RunRow* r = current()) emit cloneRun(QString::fromStdString(r->info.job_json));
  });
  connect(resume, &QPushButton::clicked, this, [this, current] {
    const RunRow* r = current();
    if (!r) return;
    if (r->info.status == RunStatus::kRunning && r->info.pid && WorkerClient::alive(*r->info.pid))
      return void(QMessageBox::information(this, tr("Resume"), tr("This run is still going.")));
    const auto ckpts = list_run_checkpoints(r->info.run_dir);
    if (ckpts.empty())
      return void(QMessageBox::information(this, tr("Resume"), tr("This run has no checkpoint.")));
    const QString runDir = QString::fromStdString(r->info.run_dir);
    QString error;
    const qint64 pid =
        WorkerClient::launch(runDir + "/job.json", QString::fromStdString(ckpts.back()), &error);
    if (pid < 0) return void(QMessageBox::warning(this, tr("Resume"), error));
    emit resumed(runDir, pid);
  });
  connect(del, &QPushButton::clicked, this, [this, current] {
    const RunRow* r = current();
    if (!r) return;
    const QString name = QString::fromStdString(r->info.name);
    if (QMessageBox::question(this, tr("Delete run"),
                              tr("Delete \"%1\" and its folder %2?")
                                  .arg(name, QString::fromStdString(r->info.run_dir))) !=
        QMessageBox::Yes)
      return;
    const QString err = deleteRun(model_, QString::fromStdString(r->info.id));
    if (!err.isEmpty()) QMessageBox::warning(this, tr("Delete run"), err);
  });
}

void HistoryPage::setFilter(const QString& text) {
  proxy_->setFilterFixedString(text);
}

QStringList HistoryPage::selectedRunIds() const {
  QStringList ids;
  for (const QModelIndex& i : table_->selectionModel()->selectedRows())
    ids << QString::fromStdString(model_->run(proxy_->mapToSource(i).row()).info.id);
  return ids;
}

QString HistoryPage::deleteRun(RunHistoryModel* model, const QString& runId) {
  const int row = model->rowOfRun(runId);
  if (row < 0) return tr("No run %1").arg(runId);
  const RunInfo info = model->run(row).info;
  if (info.status == RunStatus::kRunning && info.pid && WorkerClient::alive(*info.pid))
    return tr("The run is still going; stop it first.");
  if (Status st = model->store()->delete_run(info.id); !st.ok())
    return QString::fromStdString(st.message());
  if (!info.run_dir.empty()) QDir(QString::fromStdString(info.run_dir)).removeRecursively();
  model->refresh();
  return {};
}

}  // namespace spillway::ui

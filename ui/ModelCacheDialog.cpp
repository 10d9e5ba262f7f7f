#include "ModelCacheDialog.h"

#include <QDialogButtonBox>
#include <QHeaderView>
#include <QJsonDocument>
#include <QLabel>
#include <QProcess>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>
#include <algorithm>

#include "Format.h"
#include "WorkerClient.h"

namespace spillway::ui {
namespace {

enum Column { kModel, kFamily, kParameters, kOnDisk, kFits, kWhy, kColumns };

}  // namespace

ModelCacheDialog::ModelCacheDialog(const QString& jobPath, const QString& hubDir, QWidget* parent)
    : QDialog(parent) {
  setWindowTitle(tr("Models in the Hugging Face cache"));
  auto* layout = new QVBoxLayout(this);
  status_ = new QLabel(tr("Reading the cache and planning each model on this machine…"));
  status_->setWordWrap(true);
  layout->addWidget(status_);
  table_ = new QTableWidget(0, kColumns);
  table_->setHorizontalHeaderLabels(
      {tr("Model"), tr("Family"), tr("Parameters"), tr("On disk"), tr("Fits"), tr("Why")});
  table_->setSelectionBehavior(QAbstractItemView::SelectRows);
  table_->setSelectionMode(QAbstractItemView::SingleSelection);
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->verticalHeader()->hide();
  table_->horizontalHeader()->setStretchLastSection(true);
  table_->setWordWrap(false);
  layout->addWidget(table_, 1);
  auto* buttons = new QDialogButtonBox(QDialogButtonBox::Cancel);
  use_ = buttons->addButton(tr("Use this model"), QDialogButtonBox::AcceptRole);
  use_->setEnabled(false);
  layout->addWidget(buttons);
  connect(buttons, &QDialogButtonBox::rejected, this, &QDialog::reject);
  connect(use_, &QPushButton::clicked, this, &ModelCacheDialog::choose);
  connect(table_, &QTableWidget::cellDoubleClicked, this, &ModelCacheDialog::choose);
  connect(table_, &QTableWidget::itemSelectionChanged, this, [this] {
    const int row = table_->currentRow();
    use_->setEnabled(row >= 0 && row < models_.size() && models_[row]["usable"].toBool());
  });
  resize(900, 420);
  start(jobPath, hubDir);
}

ModelCacheDialog::~ModelCacheDialog() {
  if (process_) {
    process_->disconnect(this);
    process_->kill();
    process_->waitForFinished(1000);
  }
}

void ModelCacheDialog::start(const QString& jobPath, const QString& hubDir) {
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) {
    status_->setText(tr("spillway-worker was not found next to the app or on PATH."));
    return;
  }
  QStringList args{"models", "--json"};
  if (!jobPath.isEmpty()) args << "--job" << jobPath;
  if (!hubDir.isEmpty()) args << "--hub" << hubDir;
  process_ = new QProcess(this);
  QProcess* p = process_;
  connect(p, &QProcess::finished, this, [this, p](int code, QProcess::ExitStatus) {
    process_ = nullptr;
    fill(p->readAllStandardOutput(), p->readAllStandardError(), code);
    p->deleteLater();
  });
  connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;
    process_ = nullptr;
    fill({}, tr("could not start %1: %2").arg(p->program(), p->errorString()).toUtf8(), -1);
    p->deleteLater();
  });
  p->start(worker, args);
}

void ModelCacheDialog::fill(const QByteArray& out, const QByteArray& err, int code) {
  models_.clear();
  for (const QByteArray& line : out.split('\n')) {
    const QJsonObject o = QJsonDocument::fromJson(line).object();
    if (o.contains("repo")) models_ << o;
  }
  if (code != 0) {
    status_->setText(
        tr("Listing the cache failed: %1").arg(QString::fromUtf8(err).trimmed().section('\n', -1)));
    emit listed();
    return;
  }
  table_->setRowCount(models_.size());
  const QColor dim = palette().color(QPalette::Disabled, QPalette::Text);
  for (int row = 0; row < models_.size(); ++row) {
    const QJsonObject& m = models_[row];
    const bool usable = m["usable"].toBool();
    const bool fits = m["fits"].toBool();
    const QString texts[kColumns] = {m["repo"].toString(),
                                     m["family"].toString(usable ? QString() : tr("—")),
                                     usable ? formatCount(m["parameters"].toDouble()) : tr("—"),
                                     usable ? formatBytes(m["bytes_on_disk"].toDouble()) : tr("—"),
                                     !usable ? tr("cannot train")
                                     : fits  ? tr("yes")
                                             : tr("no"),
                                     m["why"].toString()};
    for (int c = 0; c < kColumns; ++c) {
      auto* item = new QTableWidgetItem(texts[c]);
      item->setToolTip(c == kModel ? m["path"].toString() : texts[c]);
      if (!usable) item->setForeground(dim);
      table_->setItem(row, c, item);
    }
  }
  table_->resizeColumnsToContents();
  const int usable = std::count_if(models_.begin(), models_.end(),
                                   [](const QJsonObject& m) { return m["usable"].toBool(); });
  status_->setText(
      models_.isEmpty()
          ? tr("No models in the Hugging Face cache. Download one with "
               "`huggingface-cli download ORG/NAME`, or choose a folder with Browse…")
          : tr("%1 in the cache, %2 that Spillway can train. Double-click one to use it.")
                .arg(models_.size() == 1 ? tr("1 model") : tr("%1 models").arg(models_.size()))
                .arg(usable));
  emit listed();
}

void ModelCacheDialog::choose() {
  const int row = table_->currentRow();
  if (row < 0 || row >= models_.size() || !models_[row]["usable"].toBool()) return;
  chosen_ = models_[row]["path"].toString();
  accept();
}

}  // namespace spillway::ui

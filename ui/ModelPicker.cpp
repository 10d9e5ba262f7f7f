#include "ModelPicker.h"

#include <QComboBox>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QSettings>
#include <QVBoxLayout>
#include <utility>

#include "DialogFolder.h"
#include "JobForm.h"
#include "ModelCacheDialog.h"
#include "PoolTask.h"

namespace spillway::ui {

ModelPicker::ModelPicker(QWidget* parent) : QGroupBox(tr("Model"), parent) {
  auto* ml = new QVBoxLayout(this);
  auto* mrow = new QHBoxLayout;
  combo_ = new QComboBox;
  combo_->setEditable(true);
  JobForm::bind(combo_, "model.path");
  combo_->addItems(QSettings().value("recent/models").toStringList());
  for (const QString& m : findHuggingFaceModels()) {
    if (combo_->findText(m) < 0) combo_->addItem(m);
  }
  combo_->setCurrentText(QString());
  auto* browse = new QPushButton(tr("Browse…"));
  auto* cache = new QPushButton(tr("Hugging Face cache…"));
  cache->setObjectName("modelCache");
  cache->setToolTip(tr("The models you have downloaded, with whether each fits this machine"));
  mrow->addWidget(combo_, 1);
  mrow->addWidget(browse);
  mrow->addWidget(cache);
  ml->addLayout(mrow);
  summary_ = new QLabel(tr("Choose a model folder."));
  summary_->setObjectName("modelSummary");
  summary_->setWordWrap(true);
  ml->addWidget(summary_);
  debounce_.setSingleShot(true);
  debounce_.setInterval(kDebounceMs);
  connect(&debounce_, &QTimer::timeout, this, &ModelPicker::checkInBackground);
  connect(browse, &QPushButton::clicked, this, [this] {
    const QString d = QFileDialog::getExistingDirectory(
        this, tr("Model folder"), DialogFolder::start("models", combo_->currentText()));
    DialogFolder::remember("models", d);
    if (!d.isEmpty()) setPath(d);
  });
  connect(cache, &QPushButton::clicked, this, &ModelPicker::chooseFromCache);
  connect(combo_, &QComboBox::currentTextChanged, this, &ModelPicker::typed);
  info_ = ModelInfo::inspect(QString());  // "Choose a model folder": its reason from the start
}

void ModelPicker::chooseFromCache() {
  QString why;
  const QString job = jobFile_ ? jobFile_(&why) : QString();
  ModelCacheDialog dialog(job, QString(), this);
  if (dialog.exec() == QDialog::Accepted && !dialog.chosenPath().isEmpty())
    setPath(dialog.chosenPath());
}

QString ModelPicker::path() const {
  return combo_->currentText().trimmed();
}

void ModelPicker::setPath(const QString& dir) {
  settingPath_ = true;
  combo_->setCurrentText(dir);
  settingPath_ = false;
  checkNow();
}

void ModelPicker::typed() {
  if (settingPath_) return;
  ++generation_;  // a check of the text before, still on the pool, is dropped
  inFlight_ = false;
  debounce_.start();  // a key restarts the pause
}

void ModelPicker::settle() {
  if (checking()) checkNow();
}

ModelInfo ModelPicker::inspect(const QString& dir, const QJsonObject& jobModel) {
  // No folder named and a job that creates its model from model.init (the built-in job): that
  // model is the job's, as the worker builds it; a folder typed in its place replaces it.
  return dir.isEmpty() && jobModel.contains("init") ? ModelInfo::inspectInit(jobModel)
                                                    : ModelInfo::inspect(dir);
}

void ModelPicker::checkNow() {
  debounce_.stop();
  ++generation_;  // a check of an older text still on the pool is dropped
  inFlight_ = false;
  ++inspections_;
  showChecked(inspect(path(), jobModel_));
}

void ModelPicker::checkInBackground() {
  inFlight_ = true;
  ++inspections_;
  runOnPool(
      this,
      [dir = path(), jobModel = jobModel_, generation = ++generation_] {
        return std::make_pair(generation, inspect(dir, jobModel));
      },
      [this](std::pair<quint64, ModelInfo> result) {
        if (result.first != generation_) return;  // the text changed since: its own check comes
        inFlight_ = false;
        showChecked(result.second);
      });
}

void ModelPicker::showChecked(const ModelInfo& info) {
  info_ = info;
  combo_->lineEdit()->setPlaceholderText(jobModel_.contains("init")
                                             ? tr("The job's model.init; or choose a model folder")
                                             : QString());
  summary_->setText(
      info_.ok
          ? info_.summary()
          : QString("<span style=\"color:#d32f2f\">%1</span>").arg(info_.error.toHtmlEscaped()));
  emit checked(info_);
}

}  // namespace spillway::ui

#include "TrainingForm.h"

#include <QCheckBox>
#include <QComboBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QSpinBox>
#include <QVBoxLayout>
#include <optional>

#include "JobForm.h"

namespace spillway::ui {
namespace {

// The worker's limits, from the job schema: train.lr in (0, 10], micro_batch_size up to 2^16.
const double kMaxLr = JobForm::maximum("train.lr");
const int kMaxMicroBatch = static_cast<int>(JobForm::maximum("train.micro_batch_size"));

// A learning rate as typed: 3e-3, 2E-5, 0.0003, or a decimal in this locale ("0,0003"); nullopt
// for anything else.
std::optional<double> parseNumber(const QString& text) {
  const QString t = text.trimmed();
  bool ok = false;
  double v = QLocale::c().toDouble(t, &ok);
  if (!ok) v = QLocale().toDouble(t, &ok);
  return ok ? std::optional<double>(v) : std::nullopt;
}

QString shortest(double v) {
  return QString::number(v, 'g', QLocale::FloatingPointShortest);
}

// A field with its error under it, red and hidden while there is none.
QWidget* withError(QWidget* field, QLabel** error, const QString& name) {
  auto* w = new QWidget;
  auto* l = new QVBoxLayout(w);
  l->setContentsMargins(0, 0, 0, 0);
  l->setSpacing(2);
  l->addWidget(field);
  *error = new QLabel;
  (*error)->setObjectName(name);
  (*error)->setStyleSheet("color:#d32f2f");
  (*error)->setWordWrap(true);
  (*error)->hide();
  l->addWidget(*error);
  return w;
}

}  // namespace

// Two columns, so that the plan stays on screen below the form.
TrainingForm::TrainingForm(QWidget* parent) : QGroupBox(tr("Training"), parent) {
  auto* trainColumns = new QHBoxLayout(this);
  auto* tf = new QFormLayout;
  auto* tf2 = new QFormLayout;
  trainColumns->addLayout(tf);
  trainColumns->addLayout(tf2);
  // Every field from the job schema: its default, range or choices and tooltip (JobForm).
  name_ = new QLineEdit(JobSettings().name);
  JobForm::bind(name_, "name");
  steps_ = JobForm::spinBox("train.steps");
  steps_->setObjectName("steps");
  steps_->setSpecialValueText(tr("from epochs"));
  epochs_ = JobForm::doubleSpinBox("train.epochs", 2);
  epochs_->setObjectName("epochs");
  // Up to 999,999,999 shown, so that a value past the worker's limit is refused with a message
  // rather than changed without a word.
  microBatch_ = JobForm::spinBox("train.micro_batch_size", 999'999'999);
  microBatch_->setObjectName("microBatch");
  gradAccum_ = JobForm::spinBox("train.grad_accum");
  seqLen_ = JobForm::spinBox("data.seq_len");
  seqLen_->setObjectName("seqLen");
  packing_ = new QCheckBox(tr("Pack conversations"));
  JobForm::bind(packing_, "data.packing");
  packing_->setObjectName("packing");
  packing_->setChecked(JobForm::defaultValue("data.packing").toBool());
  lrValue_ = JobForm::defaultValue("train.lr").toDouble();
  lr_ = JobForm::lineEdit("train.lr");
  lr_->setText(shortest(lrValue_));
  lr_->setObjectName("learningRate");
  lr_->setToolTip(lr_->toolTip() + tr("\nTyped as 3e-4, 2E-5 or 0.0003"));
  schedule_ = JobForm::comboBox("train.schedule");
  warmup_ = JobForm::spinBox("train.warmup_steps");
  weightDecay_ = JobForm::doubleSpinBox("train.weight_decay", 4);
  clip_ = JobForm::doubleSpinBox("train.clip_grad_norm", 3);
  evalFraction_ = JobForm::doubleSpinBox("data.eval_fraction", 3);
  evalEvery_ = JobForm::spinBox("train.eval_every");
  checkpointEvery_ = JobForm::spinBox("train.checkpoint_every");
  seed_ = JobForm::integerSpinBox("data.seed");
  tf->addRow(tr("Name"), name_);
  tf->addRow(tr("Steps"), steps_);
  tf->addRow(tr("Epochs"), epochs_);
  tf->addRow(tr("Micro-batch size"), withError(microBatch_, &microBatchError_, "microBatchError"));
  tf->addRow(tr("Gradient accumulation"), gradAccum_);
  tf->addRow(tr("Sequence length"), seqLen_);
  tf->addRow(tr("Packing"), packing_);
  tf->addRow(tr("Learning rate"), withError(lr_, &lrError_, "learningRateError"));
  tf->addRow(tr("Schedule"), schedule_);
  tf2->addRow(tr("Warmup steps"), warmup_);
  tf2->addRow(tr("Weight decay"), weightDecay_);
  tf2->addRow(tr("Clip gradient norm"), clip_);
  tf2->addRow(tr("Eval fraction"), evalFraction_);
  tf2->addRow(tr("Eval every"), evalEvery_);
  tf2->addRow(tr("Checkpoint every"), checkpointEvery_);
  tf2->addRow(tr("Seed"), seed_);
  connect(seqLen_, &QSpinBox::valueChanged, this, &TrainingForm::datasetShapeChanged);
  connect(packing_, &QCheckBox::toggled, this, &TrainingForm::datasetShapeChanged);
  const auto stepsOrEpochs = [this] { epochs_->setEnabled(steps_->value() == 0); };
  stepsOrEpochs();
  connect(steps_, &QSpinBox::valueChanged, this, stepsOrEpochs);
  connect(lr_, &QLineEdit::textChanged, this, &TrainingForm::inputsChanged);
  connect(microBatch_, &QSpinBox::valueChanged, this, &TrainingForm::inputsChanged);
}

void TrainingForm::readInto(JobSettings* s) const {
  s->name = name_->text();
  s->evalFraction = evalFraction_->value();
  s->seqLen = seqLen_->value();
  s->packing = packing_->isChecked();
  s->steps = steps_->value();
  s->epochs = epochs_->value();
  s->microBatchSize = microBatch_->value();
  s->gradAccum = gradAccum_->value();
  s->lr = lrValue_;  // the last valid value; while the field's text is not one, writeJob() refuses
  s->schedule = schedule_->currentText();
  s->warmupSteps = warmup_->value();
  s->weightDecay = weightDecay_->value();
  s->clipGradNorm = clip_->value();
  s->evalEvery = evalEvery_->value();
  s->checkpointEvery = checkpointEvery_->value();
  s->seed = seed_->value();
}

void TrainingForm::fill(const JobSettings& s) {
  name_->setText(s.name);
  steps_->setValue(s.steps);
  epochs_->setValue(s.epochs);
  microBatch_->setValue(s.microBatchSize);
  gradAccum_->setValue(s.gradAccum);
  seqLen_->setValue(s.seqLen);
  packing_->setChecked(s.packing);
  lr_->setText(shortest(s.lr));
  schedule_->setCurrentText(s.schedule);
  warmup_->setValue(s.warmupSteps);
  weightDecay_->setValue(s.weightDecay);
  clip_->setValue(s.clipGradNorm);
  evalFraction_->setValue(s.evalFraction);
  evalEvery_->setValue(s.evalEvery);
  checkpointEvery_->setValue(s.checkpointEvery);
  seed_->setValue(s.seed);
}

QString TrainingForm::name() const {
  return name_->text();
}

void TrainingForm::setSeqLen(int seqLen) {
  seqLen_->setValue(seqLen);
}

void TrainingForm::setBatch(int microBatchSize, int gradAccum) {
  microBatch_->setValue(microBatchSize);
  gradAccum_->setValue(gradAccum);
}

bool TrainingForm::checkInputs() {
  const std::optional<double> lr = parseNumber(lr_->text());
  const bool lrOk = lr && *lr > 0 && *lr <= kMaxLr;  // also false for nan
  if (lrOk) lrValue_ = *lr;
  const QString range = JobForm::allowed("train.lr");
  lrError_->setText(lrOk ? QString()
                    : lr_->text().trimmed().isEmpty()
                        ? tr("Enter a learning rate, a number in %1.").arg(range)
                        : tr("\"%1\" is not a learning rate: enter a number in %2, such as "
                             "3e-4 or 0.0003.")
                              .arg(lr_->text().trimmed(), range));
  lrError_->setVisible(!lrOk);
  lr_->setStyleSheet(lrOk ? QString() : QString("QLineEdit { border: 1px solid #d32f2f; }"));
  const bool batchOk = microBatch_->value() <= kMaxMicroBatch;
  microBatchError_->setText(batchOk
                                ? QString()
                                : tr("%L1 sequences is more than the worker's %L2 per micro-batch.")
                                      .arg(microBatch_->value())
                                      .arg(kMaxMicroBatch));
  microBatchError_->setVisible(!batchOk);
  return lrOk && batchOk;
}

QString TrainingForm::inputError() const {
  if (!lrError_->text().isEmpty()) return lrError_->text();
  return microBatchError_->text();
}

}  // namespace spillway::ui

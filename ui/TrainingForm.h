// TrainingForm: New run's Training box — the run's name and every training setting of the job
// schema (steps or epochs, batch, sequence length, packing, learning rate and schedule, weight
// decay, clipping, evaluation, checkpoints, seed) in two columns, each field made by JobForm from
// the schema (its default, range or choices, tooltip). The learning rate is typed as text (3e-4,
// 2E-5, 0.0003); it and a micro-batch above the worker's limit are checked as typed, their error
// shown in red under the field (checkInputs()).
//
// Thread-safety: GUI thread. Ownership: a widget of the page; it owns its fields.
#pragma once

#include <QGroupBox>

#include "IntegerSpinBox.h"
#include "JobSettings.h"

class QCheckBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QSpinBox;
class QComboBox;

namespace spillway::ui {

class TrainingForm : public QGroupBox {
  Q_OBJECT
 public:
  explicit TrainingForm(QWidget* parent = nullptr);

  // Puts the form's fields into `job` (the learning rate: the field's last valid value).
  void readInto(JobSettings* job) const;
  // Fills the fields from `job`, in the order they are read.
  void fill(const JobSettings& job);
  QString name() const;
  // Shows or clears the field errors; true when the form can be used as typed.
  bool checkInputs();
  // Why the form cannot be used as typed ("" when it can): the learning rate's error, else the
  // micro-batch's, as shown under the field.
  QString inputError() const;
  void setSeqLen(int seqLen);
  // The plan's suggestion: a micro-batch and gradient accumulation with the same batch.
  void setBatch(int microBatchSize, int gradAccum);

 signals:
  void inputsChanged();        // the learning rate's text or the micro-batch: checkInputs() is due
  void datasetShapeChanged();  // the sequence length or packing: the dataset preview changes

 private:
  QLineEdit* name_;
  QSpinBox *steps_, *microBatch_, *gradAccum_, *seqLen_, *warmup_, *evalEvery_, *checkpointEvery_;
  IntegerSpinBox* seed_;  // data.seed: 64-bit
  QDoubleSpinBox *epochs_, *weightDecay_, *clip_, *evalFraction_;
  QCheckBox* packing_;
  QLineEdit* lr_;  // text, so that 3e-3 and 2e-5 can be typed; lrValue_ is its last valid value
  double lrValue_ = 0;  // the schema's default until the field holds another valid value
  QLabel *lrError_, *microBatchError_;
  QComboBox* schedule_;
};

}  // namespace spillway::ui

// ModelPicker: New run's Model box — the model folder field (recent folders and the Hugging Face
// cache's snapshots), Browse…, and the line under it that says what the model is or why it cannot
// be used (ModelInfo). A job that creates its model from `model.init` (setJobModel) is that model
// while the field is empty.
//
// Checking a folder opens its config.json and every safetensors header; the field is checked at
// every change of its text, so info() is its check when setPath returns.
//
// Thread-safety: GUI thread. Ownership: a widget of the page; it owns its fields.
#pragma once

#include <QGroupBox>
#include <QJsonObject>

#include "ModelInfo.h"

class QComboBox;
class QLabel;

namespace spillway::ui {

class ModelPicker : public QGroupBox {
  Q_OBJECT
 public:
  explicit ModelPicker(QWidget* parent = nullptr);

  // The field's text, trimmed ("" for none: the job's model.init when it has one).
  QString path() const;
  // Puts `dir` in the field and checks it at once (emits checked()).
  void setPath(const QString& dir);
  // The job's model section: when it holds "init", an empty field means that model, and the
  // field's placeholder says so. Takes effect at the next check.
  void setJobModel(const QJsonObject& model) { jobModel_ = model; }
  // The last check's result ("Choose a model folder." before any).
  const ModelInfo& info() const { return info_; }
  // How many checks (ModelInfo::inspect or inspectInit) ran since the picker was made.
  int inspections() const { return inspections_; }

 signals:
  // A check's result is shown.
  void checked(const ModelInfo& info);

 private:
  // The model `dir` names, or the job's model.init when `dir` is empty and the job has one.
  static ModelInfo inspect(const QString& dir, const QJsonObject& jobModel);
  void typed();     // the field's text changed
  void checkNow();
  void showChecked(const ModelInfo& info);

  QComboBox* combo_;
  QLabel* summary_;
  ModelInfo info_;
  QJsonObject jobModel_;
  bool settingPath_ = false;  // setPath is changing the text: it checks itself
  int inspections_ = 0;
};

}  // namespace spillway::ui

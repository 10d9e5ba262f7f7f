// ModelPicker: New run's Model box — the model folder field (recent folders and the Hugging Face
// cache's snapshots), Browse…, and the line under it that says what the model is or why it cannot
// be used (ModelInfo). A job that creates its model from `model.init` (setJobModel) is that model
// while the field is empty.
//
// "Hugging Face cache…" opens ModelCacheDialog: the cache's models with family, size and whether
// the job (jobFile(), New run's form) fits this machine; the one picked goes in the field.
//
// Checking a folder opens its config.json and every safetensors header. A path chosen as a whole
// (setPath: Browse…, a job file, a cloned run) is checked at once, so info() is its check when
// setPath returns. Typing is debounced: the check starts kDebounceMs after the last key, on a pool
// thread, and a result for a text that has changed since is dropped (the later text wins), so
// the window never waits on a half-typed path's files. settle() checks the field's text at once
// when its check is still to come (Launch, Plan and Save take the model as typed).
//
// Thread-safety: GUI thread; the pool work gets copies of the path and the job's model section.
// Ownership: a widget of the page; it owns its fields and timer.
#pragma once

#include <QGroupBox>
#include <QJsonObject>
#include <QTimer>
#include <functional>

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
  // Writes the form as a job file for the cache's fit check, or "" (with why) when the form is not
  // a job yet: the cache is then planned for the built-in job.
  using JobFile = std::function<QString(QString* error)>;
  void setJobFile(JobFile f) { jobFile_ = std::move(f); }
  // Opens the cache's list (modal); a model picked there is setPath()'s.
  void chooseFromCache();
  // The last check's result ("Choose a model folder." before any).
  const ModelInfo& info() const { return info_; }
  // Whether a typed path's check is still to come or running.
  bool checking() const { return debounce_.isActive() || inFlight_; }
  // Checks the field's text now if checking(); info() is the text's afterwards.
  void settle();
  // How many checks (ModelInfo::inspect or inspectInit) ran since the picker was made.
  int inspections() const { return inspections_; }
  static constexpr int kDebounceMs = 300;

 signals:
  // A check's result is shown (after setPath, settle, or a pause in the typing).
  void checked(const ModelInfo& info);

 private:
  // The model `dir` names, or the job's model.init when `dir` is empty and the job has one; any
  // thread.
  static ModelInfo inspect(const QString& dir, const QJsonObject& jobModel);
  void typed();              // the field's text changed: (re)starts the pause
  void checkNow();           // on this thread, dropping a check in flight
  void checkInBackground();  // after the pause, on a pool thread
  void showChecked(const ModelInfo& info);

  QComboBox* combo_;
  QLabel* summary_;
  QTimer debounce_;
  ModelInfo info_;
  QJsonObject jobModel_;
  JobFile jobFile_;
  quint64 generation_ = 0;  // each check bumps it; a pool result of an older one is dropped
  bool inFlight_ = false;
  bool settingPath_ = false;  // setPath is changing the text: no pause, it checks itself
  int inspections_ = 0;
};

}  // namespace spillway::ui

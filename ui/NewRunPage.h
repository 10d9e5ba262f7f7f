// NewRunPage: configure a run — model and dataset pickers with validation and preview, training
// settings, the compute backend with this machine's GPU, tier placement, the plan from
// `spillway-worker plan`, Launch and "Copy command line". The page composes one part per job:
// ModelPicker (the model folder and its check: at once when chosen, after a pause and on a pool
// thread when typed), DatasetPanel (the dataset and its preview, read on a pool thread after a
// pause in the changes), TrainingForm and PlacementForm (the job's settings, from the job
// schema), PlanPanel (plan and measure in a child process) and RunLauncher (job files and the
// worker's start). GUI thread.
#pragma once

#include <QWidget>

#include "DatasetPreview.h"
#include "JobSettings.h"
#include "ModelInfo.h"
#include "PlanPanel.h"
#include "PlanResult.h"

class QAction;
class QBoxLayout;
class QScrollArea;

namespace spillway::ui {

class DatasetPanel;
class DatasetPreviewLoader;
class GpuProbe;
class ModelPicker;
class PlacementForm;
class PlanView;
class TrainingForm;

class NewRunPage : public QWidget {
  Q_OBJECT
 public:
  explicit NewRunPage(QWidget* parent = nullptr);
  ~NewRunPage() override;

  JobSettings settings() const;
  void setSettings(const JobSettings& s);  // clone a run
  // Fills the page from a job file (resources/jobs/*.json, or one written before); relative model
  // and data paths are taken from the file's folder. False with `error`, the form untouched, for
  // a file the worker would refuse: unreadable, not JSON, or refused by the job schema (an
  // unknown key, a value out of range: the message names the key).
  bool loadJob(const QString& path, QString* error);
  // File › Save job file: the form as a job file that `spillway-worker train FILE` runs (no run
  // folder: each run gets its own). False with `error` when the form is not a job yet (a field's
  // error, no usable model, no dataset) or the file cannot be written.
  bool saveJob(const QString& path, QString* error);
  // Puts the folder in the model field and checks it at once: modelInfo() is its check.
  void setModelPath(const QString& dir);
  void setDatasetPath(const QString& path);
  // The model field's last check; while modelPicker()->checking() a typed path's is on its way.
  const ModelInfo& modelInfo() const;
  // The last preview shown; while datasetLoader()->busy() a newer one is on its way.
  const DatasetPreview& datasetPreview() const;
  const DatasetPreviewLoader* datasetLoader() const;
  ModelPicker* modelPicker() const { return model_; }
  PlanView* planView() const;
  // The GPU probe started with the page; its text() is what the label by the backend choice shows.
  const GpuProbe* gpuProbe() const;

  // Why the form cannot be used as typed ("" when it can): a learning rate that is not a number in
  // (0, 10], a micro-batch above the worker's 65,536 (shown in red under the field), or text in a
  // spin box that is not a value of its range (SpinBox.h: said under the field). Plan, Launch and
  // Copy are disabled while it is not empty, and writeJob() refuses.
  QString inputError() const;

  // Writes job.json into a new folder under the jobs folder and returns its path ("" + error):
  // Launch's, one folder a run, where the worker's output goes too.
  QString writeJob(QString* error);
  // Plan's and Measure's job: one file in a temporary folder of the page's, overwritten by each
  // plan and removed with the page (plan and measure make no run folder).
  QString writePlanJob(QString* error);
  // Copy command line's: jobs/NAME-HASH.json, named by its content and without a run folder (each
  // run of the command gets its own), so copying the same form again writes nothing new.
  QString writeCommandLineJob(QString* error);
  // Plan, Measure and Launch, as the buttons do (also used by tests and the screenshot mode).
  // plan() runs `spillway-worker plan` in the background (it measures the machine, about a second)
  // and shows the result when it ends; a newer plan() or measure() cancels one still going.
  void plan();
  // Plan, then train the job's first N steps (the spin box beside Measure, kMeasureSteps unless
  // changed) in a throwaway run and show what they measured against the plan, a table of figures
  // (`spillway-worker plan --measure N --json`): seconds to minutes, in the worker. The throwaway
  // run's temporary files go into the page's temporary folder and are removed when it ends,
  // stopped or not.
  void measure();
  // Run › Measure (Ctrl+Shift+P; Plan is Ctrl+P): measure(), enabled exactly when the Measure
  // button is. The page owns it; the window puts it in its menu.
  QAction* measureAction() const;
  static constexpr int kMeasureSteps = PlanPanel::kMeasureSteps;
  static constexpr int kMaxMeasureSteps = PlanPanel::kMaxMeasureSteps;  // the worker's limit
  // Stop: ends the plan or measure in progress (SIGTERM, then SIGKILL after kStopGraceMs) and says
  // so in the plan view; nothing is measured and nothing is emitted. A no-op when none runs.
  void stopPlan();
  static constexpr int kStopGraceMs = PlanPanel::kStopGraceMs;
  bool planning() const;
  qint64 planPid() const;  // the worker planning or measuring now, 0 when none
  bool launch(QString* runDir = nullptr);

 signals:
  void launched(const QString& runDir, qint64 pid);
  void planned(const PlanResult& plan);
  void datasetPreviewed(const DatasetPreview& preview);  // a preview (or its error) is shown

 protected:
  // Training and placement side by side where the page is wide enough, one above the other where
  // it is not (a 1920 x 1080 screen at 200%): the form never scrolls sideways.
  void resizeEvent(QResizeEvent* event) override;

 private:
  // The form as a job the worker takes, or why not (a field's error, no usable model, no data).
  bool jobForWorker(JobSettings* job, QString* error) const;
  void previewDataset();    // asks the dataset panel for a preview of the form as it is
  void checkInputs();       // shows or clears the field errors and enables the buttons to match
  QString refusal() const;  // the first spin box's refusal of its text, "" when none refuses
  void copyCommandLine();

  JobSettings loaded_;  // the last setSettings(): carries what the form does not show
  ModelPicker* model_;
  DatasetPanel* data_;
  TrainingForm* training_;
  PlacementForm* placement_;
  PlanPanel* plan_;
  QBoxLayout* settingsRow_;
  QScrollArea* scroll_;
};

}  // namespace spillway::ui

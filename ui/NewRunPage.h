// NewRunPage: configure a run — model and dataset pickers with validation and preview, training
// settings, the compute backend with this machine's GPU, tier placement, the plan from
// `spillway-worker plan`, Launch and "Copy command line". GUI thread; the model check runs when a
// path is chosen, the dataset preview on a pool thread after a pause in the changes
// (DatasetPreviewLoader), the GPU probe once on a pool thread (GpuProbe), the plan in a child
// process.
#pragma once

#include <QElapsedTimer>
#include <QWidget>
#include <memory>

#include "DatasetPreview.h"
#include "JobSettings.h"
#include "ModelInfo.h"
#include "PlanResult.h"

class QAction;
class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProcess;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTemporaryDir;
class QTextBrowser;
class QTimer;
class QCustomPlot;

namespace spillway::ui {

class DatasetPreviewLoader;
class GpuProbe;
class PlanView;

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
  void setModelPath(const QString& dir);
  void setDatasetPath(const QString& path);
  const ModelInfo& modelInfo() const { return model_; }
  // The last preview shown; while datasetLoader()->busy() a newer one is on its way.
  const DatasetPreview& datasetPreview() const { return dataset_; }
  const DatasetPreviewLoader* datasetLoader() const { return datasetLoader_; }
  PlanView* planView() const { return planView_; }
  // The GPU probe started with the page; its text() is what the label by the backend choice shows.
  const GpuProbe* gpuProbe() const { return gpuProbe_; }

  // Why the training form cannot be used as typed ("" when it can): a learning rate that is not a
  // number in (0, 10], a micro-batch above the worker's 65,536. Shown in red under the field;
  // Plan, Launch and Copy are disabled while it is not empty, and writeJob() refuses.
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
  QAction* measureAction() const { return measureAction_; }
  static constexpr int kMeasureSteps = 3;
  static constexpr int kMaxMeasureSteps = 1000;  // the worker's limit for --measure
  // Stop: ends the plan or measure in progress (SIGTERM, then SIGKILL after kStopGraceMs) and says
  // so in the plan view; nothing is measured and nothing is emitted. A no-op when none runs.
  void stopPlan();
  static constexpr int kStopGraceMs = 2000;
  bool planning() const;
  qint64 planPid() const;  // the worker planning or measuring now, 0 when none
  bool launch(QString* runDir = nullptr);

 signals:
  void launched(const QString& runDir, qint64 pid);
  void planned(const PlanResult& plan);
  void datasetPreviewed(const DatasetPreview& preview);  // a preview (or its error) is shown

 private:
  void validateModel();
  void previewDataset();
  void showDatasetPreview(const DatasetPreview& preview);
  void clearDatasetView();
  void showTemplateAndTruncation();
  void remember(const QString& key, const QString& value);
  void checkInputs();  // shows or clears the field errors and enables the buttons to match

  ModelInfo model_;
  DatasetPreview dataset_;
  QComboBox* modelCombo_;
  QLabel* modelLabel_;
  QComboBox* dataCombo_;
  QComboBox* formatCombo_;
  QComboBox* templateCombo_;
  QCheckBox* packing_;
  QLabel* dataLabel_;
  QLabel* templateUsed_;  // the chat template the preview (and training) renders with, and why
  // Truncated examples as a warning, with the two fixes as buttons.
  QWidget* truncation_;
  QLabel* truncationText_;
  QPushButton *useSeqLen_, *usePacking_;
  QProgressBar* dataBusy_;
  DatasetPreviewLoader* datasetLoader_;
  QTextBrowser* preview_;
  QCustomPlot* histogram_;
  QLineEdit* name_;
  QSpinBox *steps_, *microBatch_, *gradAccum_, *seqLen_, *warmup_, *evalEvery_, *checkpointEvery_;
  IntegerSpinBox* seed_;
  QLineEdit* lr_;  // text, so that 3e-3 and 2e-5 can be typed; lrValue_ is its last valid value
  double lrValue_ = 0;  // the schema's default until the field holds another valid value
  QLabel *lrError_, *microBatchError_;
  QDoubleSpinBox *epochs_, *weightDecay_, *clip_, *evalFraction_, *deviceGb_, *dramCapGb_;
  QComboBox *schedule_, *backend_, *optimizerTier_, *masterTier_;
  QLabel* gpuLabel_;
  GpuProbe* gpuProbe_;
  QLineEdit* ssdDir_;
  PlanView* planView_;
  QPushButton *planButton_, *measureButton_, *stopButton_, *launchButton_, *copyButton_;
  QSpinBox* measureSteps_;
  QAction* measureAction_;
  QString lastJobPath_;
  std::unique_ptr<QTemporaryDir> planDir_;
  // The form as a job the worker takes, or why not (a field's error, no usable model, no data).
  bool jobForWorker(JobSettings* job, QString* error) const;
  static bool writeJobFile(const QString& path, const JobSettings& job, QString* error);
  QString slug() const;  // the name as a file name
  JobSettings loaded_;   // the last setSettings(): carries what the form does not show
  QProcess* planProcess_ = nullptr;
  bool planStopped_ = false;  // Stop was pressed for planProcess_
  QString planBusyText_;      // what the plan view says while it runs, before the seconds
  QElapsedTimer planClock_;
  QTimer* planTicker_;  // once a second while a plan runs: the seconds in the busy line
  // `spillway-worker plan JOB --json` with `extraArgs`, the view showing `busyText` meanwhile.
  void runPlan(const QStringList& extraArgs, const QString& busyText);
  // The worker's TMPDIR: a folder in planDir_, so that what a killed worker leaves is removed.
  QString planTempDir() const;
  void planEnded(const PlanResult& result);  // shows it (unless stopped) and enables the buttons
  void cancelPlan(int waitMs);               // kills the plan process at once, no signal
};

}  // namespace spillway::ui

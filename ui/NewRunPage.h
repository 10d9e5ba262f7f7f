// NewRunPage: configure a run — model and dataset pickers with validation and preview, training
// settings, the compute backend with this machine's GPU, tier placement, the plan from
// `spillway-worker plan`, Launch and "Copy command line". GUI thread; the model check runs when a
// path is chosen, the dataset preview on a pool thread after a pause in the changes
// (DatasetPreviewLoader), the GPU probe once on a pool thread (GpuProbe), the plan in a child
// process.
#pragma once

#include <QWidget>

#include "DatasetPreview.h"
#include "JobSettings.h"
#include "ModelInfo.h"
#include "PlanResult.h"

class QCheckBox;
class QComboBox;
class QDoubleSpinBox;
class QLabel;
class QLineEdit;
class QProcess;
class QProgressBar;
class QPushButton;
class QSpinBox;
class QTextBrowser;
class QCustomPlot;

namespace spillway::ui {

class DatasetPreviewLoader;
class GpuProbe;
class PlanView;

class NewRunPage : public QWidget {
  Q_OBJECT
 public:
  explicit NewRunPage(QWidget* parent = nullptr);

  JobSettings settings() const;
  void setSettings(const JobSettings& s);  // clone a run
  // Fills the page from a job file (resources/jobs/*.json, or one written before); relative model
  // and data paths are taken from the file's folder. False with `error` for an unreadable file.
  bool loadJob(const QString& path, QString* error);
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

  // Writes job.json into a new folder under the jobs folder and returns its path ("" + error).
  QString writeJob(QString* error);
  // Plan and Launch, as the buttons do (also used by tests and the screenshot mode). plan() runs
  // `spillway-worker plan` in the background (it measures the machine, about a second) and shows
  // the result when it ends; a newer plan() cancels one still going.
  void plan();
  // Plan, then train the job's first kMeasureSteps steps in a throwaway run and show what they
  // measured against the plan (`spillway-worker plan --measure`): seconds to minutes, in the worker.
  void measure();
  static constexpr int kMeasureSteps = 3;
  bool planning() const;
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
  QSpinBox *steps_, *microBatch_, *gradAccum_, *seqLen_, *warmup_, *evalEvery_, *checkpointEvery_,
      *seed_;
  QLineEdit* lr_;  // text, so that 3e-3 and 2e-5 can be typed; lrValue_ is its last valid value
  double lrValue_ = 0;  // the schema's default until the field holds another valid value
  QLabel *lrError_, *microBatchError_;
  QDoubleSpinBox *epochs_, *weightDecay_, *clip_, *evalFraction_, *deviceGb_, *dramCapGb_;
  QComboBox *schedule_, *backend_, *optimizerTier_, *masterTier_;
  QLabel* gpuLabel_;
  GpuProbe* gpuProbe_;
  QLineEdit* ssdDir_;
  PlanView* planView_;
  QPushButton *planButton_, *measureButton_, *launchButton_, *copyButton_;
  QString lastJobPath_;
  JobSettings loaded_;  // the last setSettings(): carries what the form does not show
  QProcess* planProcess_ = nullptr;
  // `spillway-worker plan JOB --json` with `extraArgs`, the view showing `busyText` meanwhile.
  void runPlan(const QStringList& extraArgs, const QString& busyText);
};

}  // namespace spillway::ui

// PlanPanel: New run's Plan box — the plan view, Plan, Measure with its step count, Stop, and the
// row's Copy command line and Launch buttons (whose work is the page's: copyClicked(),
// launchClicked()). Plan runs `spillway-worker plan JOB --json` in a child process (it measures
// the machine, about a second); Measure adds `--measure N` (it trains N steps in a throwaway run:
// seconds to minutes). Either shows a busy line with the seconds while it runs and the result
// when it ends; a newer one cancels one still going; Stop ends it (SIGTERM, then SIGKILL after
// kStopGraceMs) and nothing is shown but that it stopped.
//
// The job comes from the page (setJobSource) and is written to a temporary folder of the panel's,
// which also holds each worker's TMPDIR (a folder per plan, for plan --measure's throwaway run):
// when a plan ends, what the worker left of its throwaway runs is removed there (only their own
// files: history/owned-files.h remove_throwaway_run), off the window's thread, so that a stopped
// worker leaves nothing of Spillway's behind; the folder goes with the panel when left empty.
//
// Thread-safety: GUI thread. Ownership: a widget of the page; it owns its process, its temporary
// folder and the Run › Measure action (the window puts it in its menu).
#pragma once

#include <QElapsedTimer>
#include <QGroupBox>
#include <functional>
#include <memory>

#include "JobSettings.h"
#include "PlanResult.h"

class QAction;
class QProcess;
class QPushButton;
class QSpinBox;
class QTemporaryDir;
class QThreadPool;
class QTimer;

namespace spillway::ui {

class PlanView;

class PlanPanel : public QGroupBox {
  Q_OBJECT
 public:
  explicit PlanPanel(QWidget* parent = nullptr);
  ~PlanPanel() override;

  // The form as a job the worker takes, or false with why not.
  using JobSource = std::function<bool(JobSettings* job, QString* error)>;
  void setJobSource(JobSource source) { jobSource_ = std::move(source); }
  // Whether the form can be used as typed: Plan, Measure, Copy and Launch are enabled to match.
  void setInputOk(bool ok);
  // Why the job cannot be launched as it stands, besides the form's own checks: the dataset
  // preview's error (empty: none). Launch is off, its tooltip says why.
  void setPreviewError(const QString& error);
  // The settings changed since the last plan: a plan that did not fit no longer holds Launch off.
  void planStale();
  // Why Launch is off (the form, the preview, or a plan that does not fit); empty when it is on.
  QString launchBlockedReason() const;

  PlanView* planView() const { return planView_; }
  QAction* measureAction() const { return measureAction_; }
  // The job for plan and measure: one file in the panel's temporary folder, overwritten by each.
  QString writePlanJob(QString* error);
  void plan();
  void measure();
  void stopPlan();
  bool planning() const;
  qint64 planPid() const;  // the worker planning or measuring now, 0 when none

  static constexpr int kMeasureSteps = 3;
  static constexpr int kMaxMeasureSteps = 1000;  // the worker's limit for --measure
  static constexpr int kStopGraceMs = 2000;

 signals:
  void planned(const PlanResult& plan);
  void copyClicked();
  void launchClicked();

 private:
  // `spillway-worker plan JOB --json` with `extraArgs`, the view showing `busyText` meanwhile.
  void runPlan(const QStringList& extraArgs, const QString& busyText);
  // The running worker's TMPDIR: a new folder in planDir_ for each plan, so that the removal of
  // what one worker left never meets the next one's files.
  QString planTempDir() const { return workerTmp_; }
  // Removes, on cleaner_, what the worker left in planTempDir() of Spillway's, then the folder
  // when it is left empty.
  void removeWorkerTemporaries();
  void planEnded(const PlanResult& result);  // shows it (unless stopped) and enables the buttons
  void cancelPlan(int waitMs);               // kills the plan process at once, no signal
  void updateButtons();

  JobSource jobSource_;
  bool inputOk_ = true;
  QString previewError_;  // setPreviewError
  QString planMisfit_;    // the last plan's reason when it did not fit, until planStale()
  PlanView* planView_;
  QPushButton *planButton_, *measureButton_, *stopButton_, *launchButton_, *copyButton_;
  QSpinBox* measureSteps_;
  QAction* measureAction_;
  std::unique_ptr<QTemporaryDir> planDir_;
  QString workerTmp_;
  int workerTmps_ = 0;
  std::unique_ptr<QThreadPool> cleaner_;  // one thread: removals in the order they were asked
  QProcess* planProcess_ = nullptr;
  bool planStopped_ = false;  // Stop was pressed for planProcess_
  QString planBusyText_;      // what the plan view says while it runs, before the seconds
  QElapsedTimer planClock_;
  QTimer* planTicker_;  // once a second while a plan runs: the seconds in the busy line
};

}  // namespace spillway::ui

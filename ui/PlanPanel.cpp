#include "PlanPanel.h"

#include <QAction>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QPointer>
#include <QProcess>
#include <QPushButton>
#include <QSpinBox>
#include <QTemporaryDir>
#include <QThreadPool>
#include <QTimer>
#include <QVBoxLayout>

#include "JobForm.h"
#include "PlanView.h"
#include "RunLauncher.h"
#include "WorkerClient.h"
#include "history/owned-files.h"

namespace spillway::ui {

PlanPanel::PlanPanel(QWidget* parent)
    : QGroupBox(tr("Plan"), parent), cleaner_(std::make_unique<QThreadPool>()) {
  cleaner_->setMaxThreadCount(1);
  auto* pl = new QVBoxLayout(this);
  planView_ = new PlanView;
  pl->addWidget(planView_);
  auto* buttons = new QHBoxLayout;
  planButton_ = new QPushButton(tr("Plan"));
  measureButton_ = new QPushButton(tr("Measure"));
  measureButton_->setObjectName("measure");
  measureSteps_ = new QSpinBox;
  measureSteps_->setObjectName("measureSteps");
  measureSteps_->setProperty(JobForm::kNotInJobProperty, true);  // Measure's, not the job's
  measureSteps_->setRange(1, kMaxMeasureSteps);
  measureSteps_->setValue(kMeasureSteps);
  measureSteps_->setSuffix(tr(" steps"));
  const QString measureTip = tr(
      "Train the job's first steps in a throwaway run and show the measured step time, tokens/s, "
      "peak HBM and DRAM and link bytes against the plan's (spillway-worker plan JOB --measure "
      "N). The first step warms up the libraries: the figures are of the steps after it.");
  measureButton_->setToolTip(measureTip);
  measureSteps_->setToolTip(measureTip);
  measureAction_ = new QAction(tr("&Measure"), this);
  measureAction_->setObjectName("measureAction");
  measureAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_P));
  measureAction_->setToolTip(measureTip);
  stopButton_ = new QPushButton(tr("Stop"));
  stopButton_->setObjectName("stopPlan");
  stopButton_->setToolTip(tr("Stop the plan or measure in progress; nothing is kept"));
  stopButton_->setEnabled(false);
  launchButton_ = new QPushButton(tr("Launch"));
  launchButton_->setObjectName("launch");
  launchButton_->setDefault(true);
  copyButton_ = new QPushButton(tr("Copy command line"));
  buttons->addWidget(planButton_);
  buttons->addWidget(measureButton_);
  buttons->addWidget(measureSteps_);
  buttons->addWidget(stopButton_);
  buttons->addStretch();
  buttons->addWidget(copyButton_);
  buttons->addWidget(launchButton_);
  pl->addLayout(buttons);
  connect(planButton_, &QPushButton::clicked, this, &PlanPanel::plan);
  connect(measureButton_, &QPushButton::clicked, this, &PlanPanel::measure);
  connect(measureAction_, &QAction::triggered, this, &PlanPanel::measure);
  connect(stopButton_, &QPushButton::clicked, this, &PlanPanel::stopPlan);
  planTicker_ = new QTimer(this);
  planTicker_->setInterval(1000);
  connect(planTicker_, &QTimer::timeout, this, [this] {
    planView_->setBusy(tr("%1 %2 s").arg(planBusyText_).arg(planClock_.elapsed() / 1000));
  });
  connect(launchButton_, &QPushButton::clicked, this, &PlanPanel::launchClicked);
  connect(copyButton_, &QPushButton::clicked, this, &PlanPanel::copyClicked);
}

PlanPanel::~PlanPanel() {
  // Before planDir_ goes: a worker still measuring writes into it.
  cancelPlan(3000);
  if (planDir_ && planDir_->isValid()) {
    // The job file this panel wrote, then the folder when nothing else is left in it (after the
    // workers' folders, which are removed first: one thread).
    cleaner_->start([dir = planDir_->path()] {
      QFile::remove(dir + "/job.json");
      QDir().rmdir(dir);
    });
  }
  cleaner_->waitForDone();
}

namespace {

// What a plan worker left in its TMPDIR `tmp` that is Spillway's: plan --measure's throwaway
// runs, each emptied of its own files only; then `tmp` when left empty. Any thread.
void removeThrowawayRuns(const QString& tmp) {
  for (const QFileInfo& d :
       QDir(tmp).entryInfoList({QString(kThrowawayRunPrefix) + "*"},
                               QDir::Dirs | QDir::Hidden | QDir::NoDotAndDotDot)) {
    if (!d.isSymLink()) (void)remove_throwaway_run(d.absoluteFilePath().toStdString());
  }
  QDir().rmdir(tmp);
}

}  // namespace

void PlanPanel::removeWorkerTemporaries() {
  if (workerTmp_.isEmpty()) return;
  cleaner_->start([tmp = workerTmp_] { removeThrowawayRuns(tmp); });
  workerTmp_.clear();
}

void PlanPanel::setInputOk(bool ok) {
  inputOk_ = ok;
  updateButtons();
}

void PlanPanel::updateButtons() {
  planButton_->setEnabled(inputOk_ && !planning());
  measureButton_->setEnabled(inputOk_ && !planning());
  measureAction_->setEnabled(measureButton_->isEnabled());
  measureSteps_->setEnabled(!planning());
  stopButton_->setEnabled(planning() && !planStopped_);
  const QString blocked = launchBlockedReason();
  launchButton_->setEnabled(blocked.isEmpty());
  launchButton_->setToolTip(blocked.isEmpty() ? tr("Start the run; Live shows it")
                                              : tr("Cannot launch: %1").arg(blocked));
  copyButton_->setEnabled(inputOk_);
}

void PlanPanel::setPreviewError(const QString& error) {
  previewError_ = error;
  updateButtons();
}

void PlanPanel::planStale() {
  if (planMisfit_.isEmpty()) return;
  planMisfit_.clear();
  updateButtons();
}

QString PlanPanel::launchBlockedReason() const {
  if (!inputOk_) return tr("a setting above is not valid (in red)");
  if (!previewError_.isEmpty())
    return tr("the dataset preview shows an error: %1").arg(previewError_);
  if (!planMisfit_.isEmpty()) return tr("the plan does not fit: %1").arg(planMisfit_);
  return {};
}

QString PlanPanel::writePlanJob(QString* error) {
  JobSettings s;
  if (!jobSource_ || !jobSource_(&s, error)) return {};
  if (!planDir_ || !planDir_->isValid()) {
    planDir_ = std::make_unique<QTemporaryDir>(QDir::tempPath() + "/spillway-plan-XXXXXX");
    planDir_->setAutoRemove(false);  // only what the panel wrote goes (~PlanPanel)
    if (!planDir_->isValid())
      return *error =
                 tr("Cannot make a temporary folder for the plan: %1").arg(planDir_->errorString()),
             QString();
  }
  const QString path = planDir_->filePath("job.json");
  return RunLauncher::writeJobFile(path, s, error) ? path : QString();
}

void PlanPanel::plan() {
  runPlan({}, tr("Planning: measuring this machine…"));
}

void PlanPanel::measure() {
  const int steps = measureSteps_->value();
  runPlan({"--measure", QString::number(steps)},
          steps == 1 ? tr("Measuring: loading the model and training 1 step…")
                     : tr("Measuring: loading the model and training %1 steps…").arg(steps));
}

void PlanPanel::cancelPlan(int waitMs) {
  if (!planProcess_) return;
  planProcess_->disconnect(this);
  planProcess_->kill();
  planProcess_->waitForFinished(waitMs);
  planProcess_->deleteLater();
  planProcess_ = nullptr;
  planTicker_->stop();
  removeWorkerTemporaries();
}

void PlanPanel::runPlan(const QStringList& extraArgs, const QString& busyText) {
  QString error;
  const QString job = writePlanJob(&error);
  cancelPlan(1000);
  if (job.isEmpty()) {
    PlanResult r;
    r.error = error;
    planEnded(r);
    return;
  }
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) {
    PlanResult r;
    r.error = tr("spillway-worker was not found next to the app or on PATH");
    planEnded(r);
    return;
  }
  // The worker's temporary files (plan --measure's throwaway run) in a new folder of the page's,
  // so that what a worker stopped before it cleans up leaves is found: removed when it ends.
  workerTmp_ = planDir_->filePath(QString("worker-tmp-%1").arg(++workerTmps_));
  const QString tmp = workerTmp_;
  if (!QDir().mkpath(tmp)) {
    PlanResult r;
    r.error = tr("Cannot make a temporary folder for the worker: %1").arg(tmp);
    planEnded(r);
    return;
  }
  planBusyText_ = busyText;
  planStopped_ = false;
  planClock_.start();
  planTicker_->start();
  planView_->setBusy(busyText);
  planProcess_ = new QProcess(this);
  QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
  env.insert("TMPDIR", tmp);
  planProcess_->setProcessEnvironment(env);
  QProcess* p = planProcess_;
  connect(p, &QProcess::finished, this, [this, p](int code, QProcess::ExitStatus) {
    const PlanResult r =
        PlanResult::fromWorkerOutput(p->readAllStandardOutput(), p->readAllStandardError(), code);
    planEnded(r);
  });
  connect(p, &QProcess::errorOccurred, this, [this, p](QProcess::ProcessError e) {
    if (e != QProcess::FailedToStart) return;  // the others end in finished()
    PlanResult r;
    r.error = tr("Could not start spillway-worker: %1").arg(p->errorString());
    planEnded(r);
  });
  p->start(worker, QStringList{"plan", job, "--json"} + extraArgs);
  updateButtons();  // Plan and Measure off, Stop on
}

void PlanPanel::planEnded(const PlanResult& r) {
  const bool stopped = planStopped_;
  const qint64 seconds = planProcess_ ? planClock_.elapsed() / 1000 : 0;
  if (planProcess_) {
    planProcess_->disconnect(this);
    planProcess_->deleteLater();
    planProcess_ = nullptr;
  }
  planTicker_->stop();
  planStopped_ = false;
  removeWorkerTemporaries();
  updateButtons();
  if (stopped) {
    planView_->setNote(tr("Stopped after %1 s: nothing was measured.").arg(seconds));
    return;
  }
  planMisfit_ = r.ok && !r.fits ? r.reason : QString();
  updateButtons();
  planView_->setPlan(r);
  emit planned(r);
}

void PlanPanel::stopPlan() {
  if (!planProcess_ || planStopped_) return;
  planStopped_ = true;
  stopButton_->setEnabled(false);
  planView_->setBusy(tr("Stopping…"));
  planTicker_->stop();
  // SIGTERM first, so that a worker that handles it can clean up; SIGKILL if it has not ended
  // within the grace period. Either way finished() comes, and planEnded() empties the worker's
  // temporary folder.
  planProcess_->terminate();
  QPointer<QProcess> p = planProcess_;
  QTimer::singleShot(kStopGraceMs, this, [p] {
    if (p && p->state() != QProcess::NotRunning) p->kill();
  });
}

bool PlanPanel::planning() const {
  return planProcess_ != nullptr;
}

qint64 PlanPanel::planPid() const {
  return planProcess_ ? planProcess_->processId() : 0;
}

}  // namespace spillway::ui

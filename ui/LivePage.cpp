#include "LivePage.h"

#include <qcustomplot.h>
#include <signal.h>

#include <QAction>
#include <QFile>
#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QVBoxLayout>
#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <optional>

#include "Charts.h"
#include "Format.h"
#include "PoolTask.h"
#include "RunHistoryModel.h"
#include "TierChart.h"
#include "TimelineView.h"
#include "WorkerClient.h"
#include "history/run-folder.h"
#include "history/run-store.h"

namespace spillway::ui {
namespace {

const char* kLinkNames[] = {"h2d", "d2h", "ssd_read", "ssd_write"};

// The charts' least height: with the tier charts, the timeline and the log, the page fits a
// 1280 x 720 screen (window-fit-test); a taller window gives the charts the rest.
constexpr int kPlotHeight = 150;

// A series without data is hidden and leaves the legend, so an unreported metric reads as absent
// rather than as a flat zero (STYLE.md 10).
void showGraph(QCPGraph* g, bool show) {
  if (g->visible() == show) return;
  g->setVisible(show);
  if (show) {
    g->addToLegend();
  } else {
    g->removeFromLegend();
  }
}

// The host link's capacity the worker measured at start (its plan event), GB/s: {h2d, d2h}; 0 when
// not measured. A plan without a separate D2H figure measured one copy rate for both ways.
std::array<double, 2> hostLinkCapacity(const std::optional<Plan>& plan) {
  if (!plan) return {0, 0};
  const double h2d = plan->machine.h2d_bytes_per_s / 1e9;
  const double d2h = plan->machine.d2h_bytes_per_s / 1e9;
  return {h2d, d2h > 0 ? d2h : h2d};
}

// The run's name from a job file, "" when it has none.
QString jobName(const QString& jobPath) {
  QFile f(jobPath);
  if (!f.open(QIODevice::ReadOnly)) return {};
  return QJsonDocument::fromJson(f.readAll()).object()["name"].toString();
}

double median(QVector<double> v) {
  if (v.isEmpty()) return 0;
  std::nth_element(v.begin(), v.begin() + v.size() / 2, v.end());
  return v[v.size() / 2];
}

}  // namespace

LivePage::LivePage(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  layout->addLayout(buildControls());
  layout->addLayout(buildProgress());
  layout->addLayout(buildCharts(), 3);
  timeline_ = new TimelineView;
  layout->addWidget(timeline_, 1);
  layout->addWidget(buildLog());

  connect(pause_, &QPushButton::clicked, this, &LivePage::pauseOrResume);
  connect(stop_, &QPushButton::clicked, this, &LivePage::stop);
  connect(checkpoint_, &QPushButton::clicked, this, &LivePage::saveCheckpoint);
  connect(pauseAction_, &QAction::triggered, this, &LivePage::pauseOrResume);
  connect(stopAction_, &QAction::triggered, this, &LivePage::stop);
  connect(checkpointAction_, &QAction::triggered, this, &LivePage::saveCheckpoint);
  connect(&timer_, &QTimer::timeout, this, &LivePage::tick);
  timer_.setInterval(250);
  // The folder too: events.jsonl may not exist yet, and a watched file that is replaced drops out.
  auto mark = [this] { changed_ = true; };
  connect(&watcher_, &QFileSystemWatcher::fileChanged, this, mark);
  connect(&watcher_, &QFileSystemWatcher::directoryChanged, this, mark);
  updateControls();
}

QHBoxLayout* LivePage::buildControls() {
  auto* top = new QHBoxLayout;
  title_ = new QLabel(tr("No run attached. Launch one from New run, or pick one in History."));
  title_->setStyleSheet("font-weight: bold;");
  title_->setObjectName("liveTitle");
  // A long run name or folder, or a long failure, wraps or is cut (the tooltip has it whole)
  // rather than widening the window past the screen.
  title_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  pause_ = new QPushButton(tr("Pause"));
  stop_ = new QPushButton(tr("Stop"));
  checkpoint_ = new QPushButton(tr("Save checkpoint"));
  pauseAction_ = new QAction(tr("Pa&use / resume"), this);
  pauseAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_Space));
  checkpointAction_ = new QAction(tr("Save &checkpoint"), this);
  checkpointAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_S));
  stopAction_ = new QAction(tr("&Stop"), this);
  stopAction_->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Period));
  pause_->setToolTip(tr("Suspend the worker (SIGSTOP); press again to resume"));
  stop_->setToolTip(tr("Checkpoint, then stop cleanly (SIGTERM)"));
  checkpoint_->setToolTip(tr("Write a checkpoint now and keep training (SIGUSR1)"));
  top->addWidget(title_, 1);
  top->addWidget(pause_);
  top->addWidget(checkpoint_);
  top->addWidget(stop_);
  return top;
}

QHBoxLayout* LivePage::buildProgress() {
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  status_ = new QLabel;
  status_->setObjectName("liveStatus");
  status_->setWordWrap(true);
  status_->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
  status_->setTextInteractionFlags(Qt::TextSelectableByMouse);
  auto* prow = new QHBoxLayout;
  prow->addWidget(progress_, 1);
  prow->addWidget(status_, 2);
  return prow;
}

QGridLayout* LivePage::buildCharts() {
  tiers_[0] = new TierChart("hbm", tr("HBM (device)"));
  tiers_[1] = new TierChart("dram", tr("DRAM (host)"));
  tiers_[2] = new TierChart("ssd", tr("SSD"));
  buildLinkPlot();
  buildLossPlot();
  buildSpeedPlot();
  // Lines as segments rather than one stroked path: a long noisy run's thick lines cost most of a
  // replot as paths (the joins barely show at these widths).
  for (QCustomPlot* p : {static_cast<QCustomPlot*>(tiers_[0]), static_cast<QCustomPlot*>(tiers_[1]),
                         static_cast<QCustomPlot*>(tiers_[2]), links_, loss_, speed_})
    p->setPlottingHint(QCP::phFastPolylines, true);
  // Three charts a row fit a window 960 wide (a 1920 x 1080 screen at 200%) whatever their
  // legends and titles would ask: those wrap or are cut, the page never scrolls sideways.
  for (QCustomPlot* p : {static_cast<QCustomPlot*>(tiers_[0]), static_cast<QCustomPlot*>(tiers_[1]),
                         static_cast<QCustomPlot*>(tiers_[2]), links_, loss_, speed_})
    p->setMinimumWidth(200);
  auto* grid = new QGridLayout;
  grid->addWidget(tiers_[0], 0, 0);
  grid->addWidget(tiers_[1], 0, 1);
  grid->addWidget(tiers_[2], 0, 2);
  grid->addWidget(links_, 1, 0);
  grid->addWidget(loss_, 1, 1);
  grid->addWidget(speed_, 1, 2);
  return grid;
}

void LivePage::buildLinkPlot() {
  links_ = titledPlot(tr("Link throughput"), tr("time (s)"), tr("GB/s"), 2, kPlotHeight);
  const QList<QColor> linkColors = {QColor("#1f77b4"), QColor("#ff7f0e"), QColor("#2ca02c"),
                                    QColor("#d62728")};
  for (int i = 0; i < 4; ++i) {
    links_->addGraph()->setName(kLinkNames[i]);
    links_->graph(i)->setPen(QPen(linkColors[i], 1.5));
  }
  for (int i = 0; i < 2; ++i) {
    pcie_[i] = links_->addGraph();
    pcie_[i]->setPen(QPen(linkColors[i], 1, Qt::DotLine));
    linkCapacity_[i] = links_->addGraph();
    QColor c = linkColors[i];
    c.setAlpha(160);
    linkCapacity_[i]->setPen(QPen(c, 1, Qt::DashLine));
  }
  links_->yAxis2->setLabel(tr("GPU busy (%)"));
  gpuUtil_ = links_->addGraph(links_->xAxis, links_->yAxis2);
  gpuUtil_->setPen(QPen(QColor("#9467bd"), 1.5));
  for (QCPGraph* g : {pcie_[0], pcie_[1], linkCapacity_[0], linkCapacity_[1], gpuUtil_}) {
    g->setVisible(false);
    g->removeFromLegend();
  }
}

void LivePage::buildLossPlot() {
  loss_ = titledPlot(tr("Loss and learning rate"), tr("step"), tr("loss"), 2, kPlotHeight);
  loss_->addGraph()->setName(tr("loss"));
  loss_->graph(0)->setPen(QPen(QColor(31, 119, 180, 70)));
  loss_->addGraph()->setName(tr("loss (smoothed)"));
  loss_->graph(1)->setPen(QPen(QColor("#1f77b4"), 2.5));
  loss_->addGraph()->setName(tr("eval loss"));
  loss_->graph(2)->setPen(QPen(QColor("#d62728"), 2));
  loss_->graph(2)->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
  loss_->graph(2)->setLineStyle(QCPGraph::lsNone);
  loss_->yAxis2->setVisible(true);
  loss_->yAxis2->setLabel(tr("learning rate"));
  loss_->addGraph(loss_->xAxis, loss_->yAxis2)->setName(tr("lr"));
  loss_->graph(3)->setPen(QPen(QColor("#2ca02c"), 1, Qt::DashLine));
}

void LivePage::buildSpeedPlot() {
  speed_ = titledPlot(tr("Throughput"), tr("step"), tr("tokens/s"), 2, kPlotHeight);
  speed_->addGraph()->setName(tr("tokens/s"));
  speed_->graph(0)->setPen(QPen(QColor("#9467bd"), 1.5));
  speed_->yAxis2->setVisible(true);
  speed_->yAxis2->setLabel(tr("model TFLOPS"));
  speed_->addGraph(speed_->xAxis, speed_->yAxis2)->setName(tr("TFLOPS"));
  speed_->graph(1)->setPen(QPen(QColor("#8c564b"), 1.5));
}

QPlainTextEdit* LivePage::buildLog() {
  log_ = new QPlainTextEdit;
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  log_->setMinimumHeight(56);  // three lines
  log_->setMaximumHeight(120);
  return log_;
}

void LivePage::attach(const QString& runDir, qint64 pid) {
  ++attachments_;  // a store read still running for the previous run is dropped
  runDir_ = runDir;
  pid_ = pid;
  pidLookups_ = 0;
  endedInStore_ = false;
  concluding_ = false;
  ended_ = false;
  endPhase_ = Phase::kNoRun;
  endMessage_.clear();
  series_ = RunSeries();
  // The charts start empty, and so do their axes: a run that fails before its first step must not
  // show the previous run's ranges.
  for (QCustomPlot* p : findChildren<QCustomPlot*>()) resetAxes(p);
  tail_.reset(runDir);
  if (!watcher_.files().isEmpty()) watcher_.removePaths(watcher_.files());
  if (!watcher_.directories().isEmpty()) watcher_.removePaths(watcher_.directories());
  if (QFileInfo(runDir).isDir()) watcher_.addPath(runDir);
  if (QFileInfo::exists(tail_.path())) watcher_.addPath(tail_.path());
  changed_ = true;
  logShown_ = 0;
  skippedShown_ = 0;
  log_->clear();
  // Without a worker's pid, the store's row names it, or says whether the run has ended (a run that
  // failed at start has no pid and no events): nothing is judged until it is read.
  attaching_ = pid_ <= 0 && !dbPath_.empty();
  if (attaching_) {
    paused_ = false;
    sawAlive_ = false;
    title_->setText(runDir);
    title_->setToolTip(runDir);
    redraw();  // the previous run's charts go
    timer_.start();
    updateControls();
    readStore(false, [this](const StoreRead& read) { follow(read.row); });
    return;
  }
  follow(std::nullopt);
}

void LivePage::follow(const std::optional<RunInfo>& row) {
  attaching_ = false;
  if (pid_ <= 0 && row && row->pid) pid_ = *row->pid;
  // Without a worker to watch, the run store says whether the run has ended; else the events alone
  // tell.
  endedInStore_ = pid_ <= 0 && row && row->status != RunStatus::kRunning;
  paused_ = WorkerClient::suspended(pid_);  // paused before the app was restarted
  // A worker this app launched is watched from the start, even one that is gone by the first
  // tick (a job that fails at once).
  sawAlive_ = !WorkerClient::outputDir(pid_).isEmpty();
  runName_ = jobName(runDir_ + "/job.json");
  if (runName_.isEmpty()) runName_ = jobName(WorkerClient::outputDir(pid_) + "/job.json");
  title_->setText(runName_.isEmpty() ? runDir_ : tr("%1 — %2").arg(runName_, runDir_));
  title_->setToolTip(runDir_);
  redraw();  // the previous run's charts go
  timer_.start();
  tick();
}

void LivePage::readStore(bool reconcile, std::function<void(const StoreRead&)> apply) {
  ++storeReads_;
  runOnPool(
      this,
      [path = dbPath_, runDir = runDir_, reconcile]() -> StoreRead {
        StoreRead read;
        if (reconcile) {
          // The newest checkpoint as History's Resume takes it (list_run_checkpoints' last).
          const auto ckpts = list_run_checkpoints(runDir.toStdString());
          long long step = 0;
          if (!ckpts.empty() && std::sscanf(std::filesystem::path(ckpts.back()).filename().c_str(),
                                            "step-%lld", &step) == 1)
            read.newestCheckpoint = step;
        }
        if (path.empty()) return read;
        auto store = RunStore::open(path, RunHistoryModel::connectionOptions());
        if (!store.ok()) return read;
        // A running row whose worker is gone becomes interrupted (gives up after the
        // connection's busy timeout while a worker holds the write lock; the read goes on).
        if (reconcile) (void)(*store)->reconcile();
        auto runs = (*store)->list_runs();
        if (!runs.ok()) return read;
        for (const RunInfo& r : *runs) {  // newest first: a resumed run's latest row
          if (QString::fromStdString(r.run_dir) == runDir) {
            read.row = r;
            break;
          }
        }
        return read;
      },
      [this, attachment = attachments_, apply = std::move(apply)](StoreRead read) {
        --storeReads_;
        if (attachment == attachments_) apply(read);
        emit storeRead();
      });
}

QStringList LivePage::linkLegend() const {
  // The capacities the worker measured at start (its plan event): the host-device copy rates for
  // H2D and D2H, the SSD folder's rate for the SSD links when the plan carries it.
  const auto host = hostLinkCapacity(series_.plan);
  const double ssd = series_.plan ? series_.plan->machine.ssd_bytes_per_s / 1e9 : 0.0;
  const double caps[] = {host[0], host[1], ssd, ssd};
  QStringList out;
  for (int i = 0; i < 4; ++i) {
    const QString name = kLinkNames[i];
    const Ring& r = series_.linkGbps.value(name);
    if (r.isEmpty()) {
      out << tr("%1 (unavailable)").arg(name);
    } else if (caps[i] > 0) {
      out << tr("%1 %2 GB/s (%3% of %4 GB/s)")
                 .arg(name)
                 .arg(r.lastY(), 0, 'f', 2)
                 .arg(100 * r.lastY() / caps[i], 0, 'f', 0)
                 .arg(caps[i], 0, 'f', 1);
    } else {
      out << tr("%1 %2 GB/s").arg(name).arg(r.lastY(), 0, 'f', 2);
    }
  }
  return out;
}

QString LivePage::gpuLegend() const {
  const RunSeries& s = series_;
  if (s.gpuUtilPct.isEmpty()) return {};
  // Several GPUs: the host's figures, their mean busy (each GPU has a line of its own).
  QString text = s.gpuBusyPct.size() >= 2
                     ? tr("GPUs busy %1% (mean)").arg(s.gpuUtilPct.lastY(), 0, 'f', 0)
                     : tr("GPU busy %1%").arg(s.gpuUtilPct.lastY(), 0, 'f', 0);
  // Power and temperature ride along when they come in the same samples (a stale figure would
  // mislead: only the latest sample's).
  if (!s.gpuPowerW.isEmpty() && s.gpuPowerW.x.last() == s.gpuUtilPct.x.last())
    text += tr(" · %1 W").arg(s.gpuPowerW.lastY(), 0, 'f', 0);
  if (!s.gpuTempC.isEmpty() && s.gpuTempC.x.last() == s.gpuUtilPct.x.last())
    text += tr(" · %1 °C").arg(s.gpuTempC.lastY(), 0, 'f', 0);
  return text;
}

QStringList LivePage::gpuBusyLegend() const {
  QStringList names;
  for (QCPGraph* g : gpuBusy_)
    if (g->visible()) names << g->name();
  return names;
}

bool LivePage::gpuSeriesShown() const {
  return gpuUtil_->visible();
}

bool LivePage::linkCapacityShown() const {
  return linkCapacity_[0]->visible() || linkCapacity_[1]->visible();
}

qint64 LivePage::pid() {
  return pid_;
}

LivePage::Phase LivePage::phase() const {
  if (runDir_.isEmpty()) return Phase::kNoRun;
  if (ended_) return endPhase_;
  if (paused_) return Phase::kPaused;
  if (series_.state == "training") return Phase::kTraining;
  if (series_.state == "checkpointing") return Phase::kCheckpointing;
  return Phase::kStarting;
}

QString LivePage::phaseName(Phase phase) {
  switch (phase) {
    case Phase::kNoRun:
      return tr("no run");
    case Phase::kStarting:
      return tr("starting");
    case Phase::kTraining:
      return tr("training");
    case Phase::kCheckpointing:
      return tr("checkpointing");
    case Phase::kPaused:
      return tr("paused");
    case Phase::kCompleted:
      return tr("completed");
    case Phase::kStopped:
      return tr("stopped");
    case Phase::kFailed:
      return tr("failed");
    case Phase::kInterrupted:
      return tr("interrupted");
  }
  return {};
}

void LivePage::updateControls() {
  const Phase p = phase();
  const bool running = p == Phase::kStarting || p == Phase::kTraining ||
                       p == Phase::kCheckpointing || p == Phase::kPaused;
  const bool canSignal = running && pid_ > 0 && !concluding_;
  // A paused worker would hold SIGUSR1 until resumed; a checkpoint in progress needs no second.
  const bool canCheckpoint = canSignal && p == Phase::kTraining;
  pauseAction_->setEnabled(canSignal);
  stopAction_->setEnabled(canSignal);
  checkpointAction_->setEnabled(canCheckpoint);
  pause_->setEnabled(canSignal);
  stop_->setEnabled(canSignal);
  checkpoint_->setEnabled(canCheckpoint);
  pause_->setText(paused_ && running ? tr("Resume") : tr("Pause"));
}

void LivePage::stop() {
  if (!stopAction_->isEnabled()) return;
  // A suspended worker would hold the SIGTERM until resumed: resume it so that it can stop.
  if (WorkerClient::signal(pid_, SIGTERM) && paused_) pauseOrResume();
}

void LivePage::saveCheckpoint() {
  if (!checkpointAction_->isEnabled()) return;
  WorkerClient::signal(pid_, SIGUSR1);
}

void LivePage::pauseOrResume() {
  if (!pauseAction_->isEnabled()) return;
  if (WorkerClient::signal(pid_, paused_ ? SIGCONT : SIGSTOP)) {
    paused_ = !paused_;
    updateControls();
    redraw();  // the status says paused at once, and the ETA waits
  }
}

int LivePage::tick() {
  // Nothing is judged while the store's row is read: the worker's pid, or how the run ended.
  if (runDir_.isEmpty() || attaching_ || concluding_) return 0;
  // A worker that History opened before it wrote its row: look for its pid for a while.
  if (pid_ <= 0 && !ended_ && !dbPath_.empty() && !storeBusy() && pidLookups_ < 40 &&
      pidLookups_++ % 4 == 0)
    readStore(false, [this](const StoreRead& read) {
      const std::optional<RunInfo>& row = read.row;
      if (pid_ > 0 || ended_ || !row || !row->pid) return;
      pid_ = *row->pid;
      updateControls();
    });
  // Liveness before the events: whatever a worker wrote before it exited is read on this tick.
  const bool alive = !ended_ && WorkerClient::alive(pid_);
  if (alive) sawAlive_ = true;
  // A worker whose pid is unknown (a run folder attached by hand) is not judged by its pid.
  const bool gone = !ended_ && ((pid_ > 0 && !alive) || endedInStore_);
  if (!gone && !changed_ && ++quietTicks_ < 4) return 0;
  changed_ = false;
  quietTicks_ = 0;
  if (watcher_.files().isEmpty() && QFileInfo::exists(tail_.path())) watcher_.addPath(tail_.path());
  if (watcher_.directories().isEmpty() && QFileInfo(runDir_).isDir()) watcher_.addPath(runDir_);
  int n = tail_.poll(series_);
  // A final state ends the run only once its worker is gone: a resumed run's events.jsonl still
  // holds the state its previous worker ended with.
  const bool final =
      series_.state == "completed" || series_.state == "stopped" || series_.state == "failed";
  const bool wasEnded = ended_;
  const bool ending = !ended_ && (gone || (final && pid_ <= 0));
  if (ending) n += tail_.finish(series_);  // a last line cut off by the worker's end
  if (tail_.skipped() > skippedShown_) {
    // Said in the log, once per new count: the charts go on with the lines that could be read.
    const int k = tail_.skipped();
    series_.appendLog(
        k == 1
            ? tr("Line %1 of events.jsonl could not be read (damaged, or cut off when the worker "
                 "stopped) and was skipped; the charts show the other lines.")
                  .arg(tail_.firstSkippedLine())
            : tr("%1 lines of events.jsonl could not be read (damaged, or cut off when the worker "
                 "stopped) and were skipped, the first at line %2; the charts show the other "
                 "lines.")
                  .arg(k)
                  .arg(tail_.firstSkippedLine()));
    skippedShown_ = k;
    ++n;
  }
  if (ending) conclude(sawAlive_);
  if (n > 0 || ended_ != wasEnded) redraw();
  updateControls();
  return n;
}

void LivePage::conclude(bool watched) {
  paused_ = false;
  const WorkerClient::LastWords words = WorkerClient::lastWords(
      WorkerClient::outputDir(pid_).isEmpty() ? runDir_ : WorkerClient::outputDir(pid_));
  // The worker's own last line first: a job that failed before its run began wrote no events at
  // all (and a failed resume's events.jsonl ends with the previous worker's state).
  if (!words.code.isEmpty()) return end(watched, Phase::kFailed, words.message);
  if (series_.state == "completed") return end(watched, Phase::kCompleted, {});
  if (series_.state == "stopped") return end(watched, Phase::kStopped, {});
  if (series_.state == "failed")
    return end(watched, Phase::kFailed,
               !series_.lastError.isEmpty() ? series_.lastError : words.message);
  if (!words.done && !words.message.isEmpty())  // its message on stderr only (without --json)
    return end(watched, Phase::kFailed, words.message);
  if (words.done) return end(watched, Phase::kCompleted, {});
  // The store's row says the rest, once its running row is marked interrupted, and the run
  // folder what a resume would continue from: read off the window's thread (the mark waits for a
  // worker's write lock, a folder can be on a slow disk); the run is judged when they are back.
  concluding_ = true;
  updateControls();  // the worker is gone: nothing to signal
  readStore(true, [this, watched, words](const StoreRead& read) {
    concluding_ = false;
    concludeFromStore(watched, words, read);
    redraw();
    updateControls();
  });
}

void LivePage::concludeFromStore(bool watched, const WorkerClient::LastWords& words,
                                 const StoreRead& read) {
  const std::optional<RunInfo>& row = read.row;
  Phase phase = Phase::kInterrupted;
  QString message;
  if (row) {
    if (row->status == RunStatus::kFailed) phase = Phase::kFailed;
    if (row->status == RunStatus::kCompleted) phase = Phase::kCompleted;
    if (row->status == RunStatus::kStopped) phase = Phase::kStopped;
    message = QString::fromStdString(row->error_message);
  }
  if (message.isEmpty() || (watched && phase == Phase::kInterrupted))
    message =
        !watched ? tr("No worker is running this run.")
        // What is on disk, not what the schedule promised: a worker killed before its first
        // checkpoint (or before the write of one finished) left none.
        : read.newestCheckpoint
            ? tr("The worker (pid %1) exited without finishing the run: it was killed or "
                 "crashed. Its newest checkpoint is from step %2: Resume in History continues "
                 "from step %2.")
                  .arg(pid_)
                  .arg(*read.newestCheckpoint)
            : tr("The worker (pid %1) exited without finishing the run: it was killed or "
                 "crashed. It saved no checkpoint, so there is nothing to resume from: launch "
                 "it again (History › Clone) to start from the beginning.")
                  .arg(pid_);
  if (watched && !words.stderrTail.isEmpty())
    message += tr("\n\nIts last output:\n%1").arg(words.stderrTail);
  end(watched, phase, message);
}

void LivePage::end(bool watched, Phase phase, const QString& message) {
  ended_ = true;
  endPhase_ = phase;
  endMessage_ = message;
  if (!watched) return;  // an old run: its status line says how it ended
  if ((endPhase_ == Phase::kFailed || endPhase_ == Phase::kInterrupted) && !endMessage_.isEmpty() &&
      endMessage_ != series_.lastError)
    series_.appendLog(tr("%1: %2").arg(phaseName(endPhase_), endMessage_));
  emit runEnded(runDir_, endPhase_, endMessage_);
  if (endPhase_ != Phase::kFailed && endPhase_ != Phase::kInterrupted) return;
  // Not modal: the charts and the log stay readable, and nothing waits on the answer.
  auto* box = new QMessageBox(
      QMessageBox::Critical,
      endPhase_ == Phase::kFailed ? tr("The run failed") : tr("The worker stopped"),
      endPhase_ == Phase::kFailed
          ? tr("%1 failed:\n\n%2").arg(runName_.isEmpty() ? runDir_ : runName_, endMessage_)
          : endMessage_,
      QMessageBox::Ok, this);
  box->setObjectName("runEndedDialog");
  box->setAttribute(Qt::WA_DeleteOnClose);
  box->setTextInteractionFlags(Qt::TextSelectableByMouse);
  box->open();
}

QString LivePage::statusText() const {
  return status_->text();
}

void LivePage::redrawThroughput() {
  const RunSeries& s = series_;
  // Model TFLOPS is 6·N·tokens/s (PaLM appendix B), the same curve in other units: drawn as a
  // second line it lies exactly on the first. One line, then, read against both axes; the right
  // axis is the left one times the run's TFLOPS per token/s. A run whose ratio varies (a worker
  // that counts FLOPs otherwise) gets its own line again.
  QVector<double> ratios;
  for (int i = 0; i < std::min(s.tflops.size(), s.tokensPerSecond.size()); ++i)
    if (s.tokensPerSecond.y[i] > 0) ratios << s.tflops.y[i] / s.tokensPerSecond.y[i];
  const double ratio = median(ratios);
  bool proportional = ratio > 0;
  for (double r : ratios) proportional = proportional && std::abs(r - ratio) <= 0.01 * ratio;
  setDecimatedData(speed_->graph(0), s.tokensPerSecond.x, s.tokensPerSecond.y);
  setDecimatedData(speed_->graph(1), s.tflops.x, s.tflops.y);
  showGraph(speed_->graph(1), !proportional && !s.tflops.isEmpty());
  speed_->graph(0)->setName(proportional ? tr("tokens/s (right axis: model TFLOPS)")
                                         : tr("tokens/s"));
  double top = 0, tflopsTop = 0;
  for (double v : s.tokensPerSecond.y) top = std::max(top, v);
  for (double v : s.tflops.y) tflopsTop = std::max(tflopsTop, v);
  speed_->xAxis->rescale();
  if (s.tokensPerSecond.size() == 1) {
    const double x = s.tokensPerSecond.x[0];
    speed_->xAxis->setRange(x - 1, x + 1);
  }
  speed_->yAxis->setRange(0, top > 0 ? top * 1.1 : 1);
  speed_->yAxis2->setRange(0, proportional ? speed_->yAxis->range().upper * ratio
                                           : (tflopsTop > 0 ? tflopsTop * 1.1 : 1));
  speed_->replot(QCustomPlot::rpQueuedReplot);
}

bool LivePage::chartsShown() const {
  return isWindow() || isVisibleTo(window());
}

void LivePage::showEvent(QShowEvent* event) {
  QWidget::showEvent(event);
  if (chartsStale_) redrawCharts();
}

void LivePage::redrawCharts() {
  chartsStale_ = false;
  const RunSeries& s = series_;
  for (TierChart* t : tiers_) t->update(s);
  double linkTop = 0;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;  // the time the links cover
  const auto cover = [&](const Ring& r) {
    for (double v : r.y) linkTop = std::max(linkTop, v);
    if (!r.isEmpty()) t0 = std::min(t0, r.x.first()), t1 = std::max(t1, r.x.last());
  };
  for (int i = 0; i < 4; ++i) {
    const Ring& r = s.linkGbps.value(kLinkNames[i]);
    setDecimatedData(links_->graph(i), r.x, r.y);
    cover(r);
  }
  const QStringList legend = linkLegend();
  for (int i = 0; i < 4; ++i) links_->graph(i)->setName(legend[i]);
  const char* pcieKeys[] = {"rx", "tx"};
  const QString pcieNames[] = {tr("PCIe host→GPU"), tr("PCIe GPU→host")};
  for (int i = 0; i < 2; ++i) {
    const Ring& r = s.pcieGbps.value(pcieKeys[i]);
    setDecimatedData(pcie_[i], r.x, r.y);
    cover(r);
    pcie_[i]->setName(tr("%1 %2 GB/s (GPU counter)").arg(pcieNames[i]).arg(r.lastY(), 0, 'f', 2));
    showGraph(pcie_[i], !r.isEmpty());
  }
  const auto host = hostLinkCapacity(s.plan);
  for (int i = 0; i < 2; ++i) {
    // One line when both ways were measured as one copy rate.
    const bool show = host[i] > 0 && t1 >= t0 && (i == 0 || host[1] != host[0]);
    if (show) {
      linkCapacity_[i]->setData({t0, t1}, {host[i], host[i]}, true);
      linkCapacity_[i]->setName(
          i == 0 && host[1] == host[0]
              ? tr("host link capacity %1 GB/s").arg(host[0], 0, 'f', 1)
              : tr("%1 capacity %2 GB/s").arg(kLinkNames[i]).arg(host[i], 0, 'f', 1));
      linkTop = std::max(linkTop, host[i]);
    }
    showGraph(linkCapacity_[i], show);
  }
  setDecimatedData(gpuUtil_, s.gpuUtilPct.x, s.gpuUtilPct.y);
  gpuUtil_->setName(gpuLegend());
  showGraph(gpuUtil_, !s.gpuUtilPct.isEmpty());
  // Several GPUs: each one's utilisation too, on the same axis ("GPU 0 busy 87%").
  int k = 0;
  if (s.gpuBusyPct.size() >= 2) {
    static const QColor kGpuColors[] = {QColor("#17becf"), QColor("#bcbd22"), QColor("#e377c2"),
                                        QColor("#7f7f7f"), QColor("#8c564b"), QColor("#9467bd"),
                                        QColor("#ff9896"), QColor("#98df8a")};
    for (auto it = s.gpuBusyPct.cbegin(); it != s.gpuBusyPct.cend(); ++it, ++k) {
      if (k == gpuBusy_.size()) {
        QCPGraph* g = links_->addGraph(links_->xAxis, links_->yAxis2);
        g->setPen(QPen(kGpuColors[k % std::size(kGpuColors)], 1, Qt::DashDotLine));
        g->setVisible(false);
        g->removeFromLegend();
        gpuBusy_ << g;
      }
      setDecimatedData(gpuBusy_[k], it->x, it->y);
      gpuBusy_[k]->setName(tr("GPU %1 busy %2%").arg(it.key()).arg(it->lastY(), 0, 'f', 0));
      showGraph(gpuBusy_[k], !it->isEmpty());
    }
  }
  for (; k < gpuBusy_.size(); ++k) showGraph(gpuBusy_[k], false);
  links_->yAxis2->setVisible(gpuUtil_->visible());
  links_->rescaleAxes();
  links_->yAxis->setRange(0, std::max(linkTop * 1.1, 0.01));
  links_->yAxis2->setRange(0, 105);
  links_->replot(QCustomPlot::rpQueuedReplot);

  setDecimatedData(loss_->graph(0), s.loss.x, s.loss.y);
  smoothEma(s.loss.y, 0.9, smoothed_);
  setDecimatedData(loss_->graph(1), s.loss.x, smoothed_);
  setDecimatedData(loss_->graph(2), s.evalLoss.x, s.evalLoss.y);
  setDecimatedData(loss_->graph(3), s.lr.x, s.lr.y);
  loss_->rescaleAxes();
  fitValueAxis(loss_->yAxis);   // one loss point, or a constant learning rate, gets a range of
  fitValueAxis(loss_->yAxis2);  // its own around the value
  loss_->replot(QCustomPlot::rpQueuedReplot);
  redrawThroughput();
  timeline_->setComputeName(s.plan && s.plan->on_cpu() ? tr("CPU") : tr("GPU"));
  // A final state (or a worker gone) means no step span follows the last: frame the last step.
  const bool over = ended_ || s.state == "completed" || s.state == "stopped" || s.state == "failed";
  timeline_->setSpans(s.spans, 0, &s.timeAtStep, over);
}

void LivePage::redraw() {
  const RunSeries& s = series_;
  if (chartsShown()) {
    redrawCharts();
  } else {
    chartsStale_ = true;
  }

  progress_->setValue(s.totalSteps > 0 ? static_cast<int>(1000 * s.lastStep / s.totalSteps) : 0);
  progress_->setFormat(QString("step %1 / %2").arg(s.lastStep).arg(s.totalSteps));
  // The median of the recent steps: a step that spanned a pause (SIGSTOP stops its clock too)
  // does not move the estimate.
  const int k = std::min(20, s.stepSeconds.size());
  const double eta = k ? median(s.stepSeconds.y.mid(s.stepSeconds.size() - k)) *
                             static_cast<double>(s.totalSteps - s.lastStep)
                       : -1;
  const Phase p = phase();
  const bool stepped = !s.loss.isEmpty();
  // After the last step the worker evaluates, checkpoints and exports: no steps are left to time.
  const bool finishing = (p == Phase::kTraining || p == Phase::kCheckpointing) &&
                         s.totalSteps > 0 && s.lastStep >= s.totalSteps;
  QString text =
      tr("%1 · loss %2 · %3 tokens/s · %4 tokens · ETA %5")
          .arg(phaseName(p))
          .arg(stepped ? QString::number(s.loss.lastY(), 'f', 4) : QStringLiteral("—"))
          .arg(stepped ? QString::number(s.tokensPerSecond.lastY(), 'f', 0) : QStringLiteral("—"))
          .arg(formatCount(static_cast<double>(s.tokens)))
          .arg(finishing ? tr("— (finishing: final evaluation, checkpoint, "
                              "export)")
               : p == Phase::kTraining && k > 0 ? formatDuration(eta)
               : p == Phase::kPaused            ? tr("— (paused)")
                                                : QStringLiteral("—"));
  const bool bad = p == Phase::kFailed || p == Phase::kInterrupted;
  if (bad && !endMessage_.isEmpty()) text += " · " + endMessage_.section('\n', 0, 0);
  status_->setText(text);
  status_->setToolTip(text);
  status_->setStyleSheet(bad ? "color: #d62728;" : QString());
  const qint64 first = s.logTotal - s.log.size();  // the ring may have dropped older lines
  for (logShown_ = std::max(logShown_, first); logShown_ < s.logTotal; ++logShown_)
    log_->appendPlainText(s.log[static_cast<int>(logShown_ - first)]);
}

}  // namespace spillway::ui

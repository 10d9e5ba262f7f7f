// LivePage: a running (or finished) run as it happens — HBM, DRAM and SSD by category (HBM also as
// the GPU reports it), link throughput against the measured capacity (the plan's machine figures)
// with the GPU's own PCIe counters and its utilisation when the worker reports them (hidden, never
// drawn as zero, when it does not; on several GPUs the host's totals, with each GPU's utilisation
// and HBM as lines of their own), loss (raw faint, smoothed bold), learning rate,
// tokens/s and TFLOPS, the layer timeline, progress with ETA, the log, and Pause / Stop / Save
// checkpoint wired to the worker by signals. A QFileSystemWatcher marks events.jsonl changed; a
// 250 ms timer reads what was appended (also every second without a change notice, which network
// file systems do not send) and redraws once per tick (STYLE.md 11); nothing is parsed between
// ticks. A tick without new events draws nothing; while another page of the window is shown the
// events are still read (the phase, the log and the status follow the run) but the charts wait for
// the page to be shown again. The charts set their existing graphs' data, bounded to
// kMaxDrawnPoints a series for a long run (Charts.h), and replot once, queued.
// The page knows the run's phase (starting, training, paused, ..., failed, interrupted) from its
// events and from whether its worker is alive, checked each tick before the events are read; the
// controls (the buttons and the Run menu's actions, which the page owns) follow it. A worker that
// exits without a final state is noticed on the next tick: its last words (worker.out's error,
// worker.err) or "killed or crashed" are shown in the status line, the log and a dialog, and
// runEnded() tells the window. What the run store knows (a worker's pid when none was given, how a
// run without last words ended, after marking a gone worker's row interrupted: a write that waits
// for a worker's write lock) is read on a pool thread through a connection of its own; the page
// judges the run once the read is back, and drops a read for a run it no longer follows. GUI
// thread; owns its widgets through Qt parenting.
#pragma once

#include <QFileSystemWatcher>
#include <QTimer>
#include <QWidget>
#include <functional>
#include <optional>
#include <string>

#include "EventTail.h"
#include "RunSeries.h"
#include "WorkerClient.h"
#include "history/run-store.h"

class QAction;
class QGridLayout;
class QHBoxLayout;
class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QCustomPlot;
class QCPGraph;

namespace spillway::ui {

class TierChart;
class TimelineView;

class LivePage : public QWidget {
  Q_OBJECT
 public:
  // The run as the page shows it. kInterrupted: the worker exited without a final state (killed,
  // crashed) or is gone for a run the store still lists as running.
  enum class Phase {
    kNoRun,
    kStarting,
    kTraining,
    kCheckpointing,
    kPaused,
    kCompleted,
    kStopped,
    kFailed,
    kInterrupted
  };
  Q_ENUM(Phase)

  explicit LivePage(QWidget* parent = nullptr);
  // The run store (runs.db) the page reads a run's row from, off the window's thread; "" : none.
  void setDatabase(const std::string& path) { dbPath_ = path; }
  // Whether a read of the run store is in flight (a pid looked up, a run's ending decided); each
  // ends with storeRead().
  // Follows the run in `runDir`; `pid` of its worker when known (else read from the run store).
  // The charts, log and controls start over.
  void attach(const QString& runDir, qint64 pid = -1);
  bool storeBusy() const { return storeReads_ > 0; }
  const QString& runDir() const { return runDir_; }
  const RunSeries& series() const { return series_; }
  qint64 pid();
  Phase phase() const;
  static QString phaseName(Phase phase);
  // Why the run failed or ended early (the worker's message), "" otherwise.
  const QString& endMessage() const { return endMessage_; }
  // "training · loss 2.3456 · 1234 tokens/s · 1.2 M tokens · ETA 3 min 05 s", as shown.
  QString statusText() const;
  // The controls as actions (the Run menu shows them; the buttons mirror their enabled state).
  QAction* pauseAction() const { return pauseAction_; }
  QAction* checkpointAction() const { return checkpointAction_; }
  QAction* stopAction() const { return stopAction_; }
  QCustomPlot* throughputPlot() const { return speed_; }
  QCustomPlot* linkPlot() const { return links_; }
  QCustomPlot* lossPlot() const { return loss_; }
  const TierChart* tierChart(int i) const { return tiers_[i]; }
  TimelineView* timeline() const { return timeline_; }
  // The controls, also for the Run menu: SIGSTOP/SIGCONT, SIGTERM (checkpoint, then stop; a
  // suspended worker is resumed so that it can), SIGUSR1 (checkpoint now).
  void pauseOrResume();
  void stop();
  void saveCheckpoint();
  bool paused() const { return paused_; }
  // One timer tick: poll the events and redraw (public for tests). Returns the new events.
  int tick();
  // The link names with their share of the measured link capacity, as the legend shows them.
  QStringList linkLegend() const;
  // "GPU busy 87% · 412 W · 63 °C" (power and temperature when reported); empty while the worker
  // reports no GPU utilisation, and then the series and its axis are hidden.
  QString gpuLegend() const;
  bool gpuSeriesShown() const;
  // A run on several GPUs: each GPU's utilisation line as its legend reads ("GPU 0 busy 87%"),
  // and the HBM chart has each GPU's memory (TierChart::gpuLines); empty for one GPU.
  QStringList gpuBusyLegend() const;
  // Whether the host link's measured capacity is drawn (the plan carries it).
  bool linkCapacityShown() const;

 signals:
  // The run ended while the page followed its live worker: completed, stopped, failed (with the
  // worker's message) or interrupted (its worker died).
  void runEnded(const QString& runDir, LivePage::Phase phase, const QString& message);
  // A read of the run store came back (and was applied, unless the page follows another run now).
  void storeRead();

 protected:
  void showEvent(QShowEvent* event) override;

 private:
  // The page's parts, top to bottom: the title and the controls (buttons and the Run menu's
  // actions), the progress bar and status line, the charts' grid (the tier charts over the link,
  // loss and throughput plots), and the log. The constructor adds them and the timeline, and
  // connects the controls, the timer and the watcher.
  QHBoxLayout* buildControls();
  QHBoxLayout* buildProgress();
  QGridLayout* buildCharts();
  void buildLinkPlot();
  void buildLossPlot();
  void buildSpeedPlot();
  QPlainTextEdit* buildLog();
  // The charts (marked stale instead while the page is hidden), then the status, progress, log.
  void redraw();
  void redrawCharts();
  void redrawThroughput();
  // Whether the charts are on screen, or would be when the window is shown: false while another
  // page of the window is.
  bool chartsShown() const;
  void updateControls();
  // The worker is gone: the phase from its final state, else from its last words, else from the
  // store's row (read first, off the window's thread).
  void conclude(bool watched);
  // What readStore() found: the run's row, and when asked (a worker gone) the step of the newest
  // checkpoint on disk, the one History's Resume continues from (none: the run has none).
  struct StoreRead {
    std::optional<RunInfo> row;
    std::optional<long long> newestCheckpoint;
  };
  // A worker gone without last words: the phase and message from its run's row, if any, and
  // what a resume would continue from.
  void concludeFromStore(bool watched, const WorkerClient::LastWords& words, const StoreRead& read);
  // The run has ended in `phase`: the page says so (for a `watched` worker: the log, runEnded(),
  // a dialog for a failure).
  void end(bool watched, Phase phase, const QString& message);
  // Reads the run's newest row (a resumed run's latest) from the store on a pool thread, after
  // marking the runs of gone workers interrupted when `reconcile` (and then also lists the run's
  // checkpoints); then `apply(read)` on the window's thread, unless the page was attached to a
  // run again meanwhile.
  void readStore(bool reconcile, std::function<void(const StoreRead&)> apply);
  // After attach()'s read of the store: the worker's pid and state, then the first tick.
  void follow(const std::optional<RunInfo>& row);

  std::string dbPath_;
  quint64 attachments_ = 0;  // attach() calls: a store read for an earlier one is dropped
  int storeReads_ = 0;       // store reads in flight
  bool attaching_ = false;   // attach()'s store read is in flight: nothing is judged before it
  bool concluding_ = false;  // the worker is gone and the store's read decides how the run ended
  QString runDir_;
  QString runName_;
  qint64 pid_ = -1;
  bool paused_ = false;
  bool sawAlive_ = false;      // the worker was alive while this page followed it
  bool ended_ = false;         // the phase below is final
  bool endedInStore_ = false;  // no worker known, and the store lists the run as ended
  Phase endPhase_ = Phase::kNoRun;
  QString endMessage_;
  int pidLookups_ = 0;  // ticks spent looking for an unknown worker's pid
  EventTail tail_;
  RunSeries series_;
  QTimer timer_;
  QFileSystemWatcher watcher_;
  bool changed_ = true;       // events.jsonl changed since the last poll
  bool chartsStale_ = false;  // events came in while the page was hidden
  QVector<double> smoothed_;  // the smoothed loss, kept to reuse its storage
  int quietTicks_ = 0;        // ticks without a change notice
  qint64 logShown_ = 0;       // log lines shown, counted like RunSeries::logTotal
  int skippedShown_ = 0;      // unreadable events.jsonl lines already reported in the log
  QLabel* title_;
  QProgressBar* progress_;
  QLabel* status_;
  TierChart* tiers_[3];
  QCustomPlot* links_;
  QCPGraph* pcie_[2];           // the GPU's PCIe counters: host -> GPU, GPU -> host
  QCPGraph* linkCapacity_[2];   // h2d, d2h measured capacity
  QCPGraph* gpuUtil_;           // on the right axis, %
  QVector<QCPGraph*> gpuBusy_;  // each GPU's utilisation (several GPUs), right axis
  QCustomPlot* loss_;
  QCustomPlot* speed_;
  TimelineView* timeline_;
  QPlainTextEdit* log_;
  QPushButton *pause_, *stop_, *checkpoint_;
  QAction *pauseAction_, *checkpointAction_, *stopAction_;
};

}  // namespace spillway::ui

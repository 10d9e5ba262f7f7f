// LivePage: a running (or finished) run as it happens — HBM, DRAM and SSD by category (HBM also as
// the GPU reports it), link throughput against the measured capacity (the plan's machine figures)
// with the GPU's own PCIe counters and its utilisation when the worker reports them (hidden, never
// drawn as zero, when it does not), loss (raw faint, smoothed bold), learning rate,
// tokens/s and TFLOPS, the layer timeline, progress with ETA, the log, and Pause / Stop / Save
// checkpoint wired to the worker by signals. A QFileSystemWatcher marks events.jsonl changed; a
// 250 ms timer reads what was appended (also every second without a change notice, which network
// file systems do not send) and redraws once per tick (STYLE.md 11); nothing is parsed between
// ticks. GUI thread; owns its widgets through Qt parenting, borrows the RunStore.
#pragma once

#include <QFileSystemWatcher>
#include <QTimer>
#include <QWidget>

#include "EventTail.h"
#include "RunSeries.h"

class QLabel;
class QPlainTextEdit;
class QProgressBar;
class QPushButton;
class QCustomPlot;
class QCPGraph;

namespace spillway {
class RunStore;
}

namespace spillway::ui {

class TierChart;
class TimelineView;

class LivePage : public QWidget {
  Q_OBJECT
 public:
  explicit LivePage(QWidget* parent = nullptr);
  void setStore(RunStore* store) { store_ = store; }
  // Follows the run in `runDir`; `pid` of its worker when known (else read from the run store).
  void attach(const QString& runDir, qint64 pid = -1);
  const QString& runDir() const { return runDir_; }
  const RunSeries& series() const { return series_; }
  qint64 pid();
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
  // Whether the host link's measured capacity is drawn (the plan carries it).
  bool linkCapacityShown() const;

 private:
  void redraw();

  RunStore* store_ = nullptr;
  QString runDir_;
  qint64 pid_ = -1;
  bool paused_ = false;
  EventTail tail_;
  RunSeries series_;
  QTimer timer_;
  QFileSystemWatcher watcher_;
  bool changed_ = true;  // events.jsonl changed since the last poll
  int quietTicks_ = 0;   // ticks without a change notice
  qint64 logShown_ = 0;  // log lines shown, counted like RunSeries::logTotal
  QLabel* title_;
  QProgressBar* progress_;
  QLabel* status_;
  TierChart* tiers_[3];
  QCustomPlot* links_;
  QCPGraph* pcie_[2];          // the GPU's PCIe counters: host -> GPU, GPU -> host
  QCPGraph* linkCapacity_[2];  // h2d, d2h measured capacity
  QCPGraph* gpuUtil_;          // on the right axis, %
  QCustomPlot* loss_;
  QCustomPlot* speed_;
  TimelineView* timeline_;
  QPlainTextEdit* log_;
  QPushButton *pause_, *stop_, *checkpoint_;
};

}  // namespace spillway::ui

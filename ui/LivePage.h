// LivePage: a running (or finished) run as it happens — HBM, DRAM and SSD by category, link
// throughput (also as % of the measured capacity), loss (raw faint, smoothed bold), learning rate,
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
  QCustomPlot* loss_;
  QCustomPlot* speed_;
  TimelineView* timeline_;
  QPlainTextEdit* log_;
  QPushButton *pause_, *stop_, *checkpoint_;
};

}  // namespace spillway::ui

// LivePage: a running (or finished) run as it happens — HBM, DRAM and SSD by category, link
// throughput (also as % of the measured capacity), loss (raw faint, smoothed bold), learning rate,
// tokens/s and TFLOPS, the layer timeline, progress with ETA, the log, and Pause / Stop / Save
// checkpoint wired to the worker by signals. A timer polls events.jsonl and redraws once per tick
// (STYLE.md 11); nothing is read or parsed between ticks.
#pragma once

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
  // One timer tick: poll the events and redraw (public for tests).
  int tick();

 private:
  void redraw();
  void pauseOrResume();

  RunStore* store_ = nullptr;
  QString runDir_;
  qint64 pid_ = -1;
  bool paused_ = false;
  EventTail tail_;
  RunSeries series_;
  QTimer timer_;
  int logShown_ = 0;
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

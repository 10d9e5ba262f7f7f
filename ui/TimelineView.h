// TimelineView: the layer timeline of one training step — one lane per phase (SSD→DRAM, H2D,
// compute (forward and backward), D2H, optimizer, DRAM→SSD), a box per block, coloured by layer
// depth — so the user sees whether copies and the optimizer overlap compute — under a time axis (ms
// from the start of the frame, ticks at 1-2-5 steps) and a legend (the layer colour ramp, backward
// darker, blocks that are not a layer in grey). Above the lanes, one line says what limits the
// step: each lane's busy share of the frame and a verdict ("compute-bound (GPU idle 0.9%)",
// "waiting for H2D (weights): GPU idle 14%"). Paints from RunSeries::spans. GUI thread; copies the
// spans it shows.
//
// A data-parallel run's spans name their GPU (Span::device): a chooser ("GPU 0", "GPU 1", ...)
// left of the summary line picks the GPU whose H2D, compute, reduce and D2H lanes are drawn and
// measured; the optimizer's and the SSD's lanes are the host's, one for every GPU. Such a run has
// one more lane, "reduce" (each block's gradient summed between the GPUs by NCCL, and past one
// machine the weights broadcast from the machine that holds them), between compute and D2H: a lane
// of its own because the reduce of one block runs beside the download of the one before it, on a
// stream of its own, and the verdict can then name it.
#pragma once

#include <QWidget>

#include "RunSeries.h"

class QComboBox;

namespace spillway::ui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  // Frames one step: the most recent "step" span (block "step": the trainer's forward and backward
  // of that step) that has per-block compute spans inside it and a following step span (so the
  // spans of the frame's tail, the next step's forward beside this step's optimizer, have
  // arrived), from its start to the next step span's start; the last step span only when no
  // earlier one qualifies, or when `runOver` (the run has ended: no step span will follow its
  // last), from its start to its end or the end of the D2H, optimizer and SSD spans that follow
  // it, up to the start of a later backward (the next step's, cut short by a stop). Spans that
  // overlap the frame are shown clipped to it (the previous step's optimizer and D2H at its
  // start). With windowSeconds > 0: the `windowSeconds` before the latest block span's end.
  // Without step spans: the blocks back to the first gap of half a second. Times in seconds, the
  // events' t base. `stepTimes` (RunSeries::timeAtStep: x = step, y = t of its step event), when
  // given, names the step framed.
  void setSpans(const QVector<Span>& spans, double windowSeconds = 0,
                const Ring* stepTimes = nullptr, bool runOver = false);
  // What compute runs on, for the verdict ("GPU idle 3%", "CPU idle 3%"); "GPU" by default.
  void setComputeName(const QString& name);
  int visibleSpans() const { return spans_.size(); }
  double shownSeconds() const { return t1_ - t0_; }
  double frameStart() const { return t0_; }  // seconds, the events' t base
  // The step framed, from `stepTimes`; 0 when unknown or not framed by a step span.
  qint64 frameStep() const { return step_; }

  // The lanes by their phase names: "ssd_read", "h2d", "compute", "reduce", "d2h", "optimizer",
  // "ssd_write" (the forward and backward phases go to "compute").
  static QStringList lanes();
  // The lanes drawn, top to bottom: lanes() less "reduce" unless the spans given hold a reduce (a
  // data-parallel run).
  QStringList shownLanes() const;
  // The lane drawn at `pos` (its name on the left or its row), "" elsewhere.
  QString laneAt(const QPoint& pos) const;
  // What `lane` shows, its row's tooltip: "reduce: collectives between GPUs: ...", and
  // with several GPUs whose lane it is ("GPU 1's", or the host's for every GPU).
  QString laneToolTip(const QString& lane) const;

  // The devices the spans given name, ascending (a data-parallel run's GPUs); empty for one GPU.
  QList<int> devices() const { return devices_; }
  // The device whose lanes are drawn: the chooser's, at first the lowest of devices(); -1 when
  // devices() is empty (every span is drawn).
  int device() const { return device_; }
  // Draws `device`'s lanes, as choosing it does; ignored for one devices() does not hold.
  void setDevice(int device);
  // The GPU chooser, shown while devices() holds more than one.
  QComboBox* deviceChooser() const { return chooser_; }
  // The share of the frame during which `lane` was busy, 0..1: the union of its spans clipped to
  // the frame (overlapping spans count once), over the frame's length. -1 while nothing is shown
  // or for a lane that is not one of lanes().
  double laneBusyFraction(const QString& lane) const;
  // What limits the step: "compute-bound (GPU idle 0.9%)" when compute is idle under 3% of the
  // frame; otherwise the lane busy during most of compute's idle time ("waiting for H2D
  // (weights)", "waiting for D2H (gradients)", "waiting for the optimizer", "waiting for the SSD
  // (reads)", "waiting for the SSD (writes)"), or "host (no lane busy)" when no lane was busy
  // during half of it, each followed by ": GPU idle 14%". The lane's name ("h2d", ...,
  // "compute" when compute-bound, "" for the host) in `lane` when given. Empty while nothing is
  // shown.
  QString limiter(QString* lane = nullptr) const;
  // The line drawn above the lanes: "step 9 · 6.38 s · compute 99.1% busy · H2D 39% · D2H 9% ·
  // optimizer 22% · compute-bound (GPU idle 0.9%)" (lanes with no span in the frame left out).
  QString summary() const;
  // The time axis: tick positions in seconds from the start of what is shown, and their labels
  // ("0", "20", "40 ms"); empty while no span is shown.
  QVector<double> ticks() const;
  QStringList tickLabels() const;
  // The legend as drawn: "layer 0", "layer N-1" (the ends of the colour ramp), "backward",
  // "embed / head"; empty while no span is shown.
  QStringList legend() const;
  QSize minimumSizeHint() const override;

 protected:
  bool event(QEvent* e) override;
  void paintEvent(QPaintEvent*) override;

 private:
  using Intervals = QVector<QPair<double, double>>;  // sorted, disjoint, inside [t0_, t1_]
  void frame();  // spans_ and the frame from the spans given, of device_
  void measure();
  void updateChooser();
  int lanesTop() const;  // below the summary line (and the chooser)
  int laneHeight() const;
  // What setSpans was given (shared, not copied: Qt's containers are copy-on-write).
  QVector<Span> given_;
  double windowSeconds_ = 0;
  Ring stepTimes_;
  bool hasStepTimes_ = false, runOver_ = false;
  QList<int> devices_;
  int device_ = -1;
  bool reduce_ = false;  // the spans given hold a reduce: the "reduce" lane is drawn
  QComboBox* chooser_;
  QVector<Span> spans_;
  double t0_ = 0, t1_ = 1;
  double stepEnd_ = -1;  // the framed step span's end (forward and backward done), -1 if none
  qint64 step_ = 0;
  QString computeName_ = QStringLiteral("GPU");
  bool window_ = false;
  QVector<Intervals> busy_;  // per lane, in lanes() order
};

}  // namespace spillway::ui

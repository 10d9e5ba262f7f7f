// TimelineView: the layer timeline of the most recent spans — one lane per phase (SSD→DRAM, H2D,
// compute (forward and backward), D2H, optimizer), a box per block, coloured by layer depth — so
// the user sees whether copies and the optimizer overlap compute — under a time axis (ms from the
// start of the step shown, ticks at 1-2-5 steps) and a legend (the layer colour ramp, backward
// darker, blocks that are not a layer in grey). Paints from RunSeries::spans. GUI thread; copies
// the spans it shows.
#pragma once

#include <QWidget>

#include "RunSeries.h"

namespace spillway::ui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  // Shows the blocks of the most recent step that has per-block spans (or, with windowSeconds > 0,
  // the blocks of that many seconds before the latest one). Times in seconds, the events' t base.
  void setSpans(const QVector<Span>& spans, double windowSeconds = 0);
  int visibleSpans() const { return spans_.size(); }
  double shownSeconds() const { return t1_ - t0_; }
  // The time axis: tick positions in seconds from the start of what is shown, and their labels
  // ("0", "20", "40 ms"); empty while no span is shown.
  QVector<double> ticks() const;
  QStringList tickLabels() const;
  // The legend as drawn: "layer 0", "layer N-1" (the ends of the colour ramp), "backward",
  // "embed / head"; empty while no span is shown.
  QStringList legend() const;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  QVector<Span> spans_;
  double t0_ = 0, t1_ = 1;
};

}  // namespace spillway::ui

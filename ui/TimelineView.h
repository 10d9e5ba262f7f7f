// TimelineView: the layer timeline of the most recent spans — one lane per phase (SSD→DRAM, H2D,
// compute (forward and backward), D2H, optimizer), a box per block, coloured by layer depth — so
// the user sees whether copies and the optimizer overlap compute. Paints from RunSeries::spans.
// GUI thread; copies the spans it shows.
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

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  QVector<Span> spans_;
  double t0_ = 0, t1_ = 1;
};

}  // namespace spillway::ui

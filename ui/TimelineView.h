// TimelineView: the layer timeline of the most recent spans — one lane per phase (SSD→DRAM, H2D,
// compute (forward and backward), D2H, optimizer), a box per block, coloured by layer depth — so
// the user sees whether copies and the optimizer overlap compute. Paints from RunSeries::spans.
#pragma once

#include <QWidget>

#include "RunSeries.h"

namespace spillway::ui {

class TimelineView : public QWidget {
  Q_OBJECT
 public:
  explicit TimelineView(QWidget* parent = nullptr);
  void setSpans(const QVector<Span>& spans, double windowSeconds = 0);
  int visibleSpans() const { return spans_.size(); }

 protected:
  void paintEvent(QPaintEvent*) override;

 private:
  QVector<Span> spans_;
  double t0_ = 0, t1_ = 1;
};

}  // namespace spillway::ui

#include "TimelineView.h"

#include <QPainter>

namespace spillway::ui {
namespace {
const QStringList kLanes = {"ssd_read", "h2d", "compute", "d2h", "optimizer", "ssd_write"};
const QStringList kLaneNames = {"SSD→DRAM", "H2D", "compute", "D2H", "optimizer", "DRAM→SSD"};

int laneOf(const QString& phase) {
  if (phase == "forward" || phase == "backward" || phase == "compute") return 2;
  return static_cast<int>(kLanes.indexOf(phase));
}
}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(150);
}

void TimelineView::setSpans(const QVector<Span>& spans, double window) {
  spans_.clear();
  // The trainer records one "step" span per step and the per-block spans of about one step a
  // second; show the blocks of the most recent detailed step, framed by that step's span.
  int lastBlock = -1;
  for (int i = spans.size() - 1; i >= 0 && lastBlock < 0; --i) {
    if (spans[i].block != "step") lastBlock = i;
  }
  if (lastBlock < 0) return QWidget::update();
  const Span& lb = spans[lastBlock];
  double t0 = lb.start, t1 = lb.end;
  bool framed = false;
  if (window > 0) {
    t0 = lb.end - window, framed = true;
  } else {
    for (int i = spans.size() - 1; i >= 0; --i) {
      const Span& s = spans[i];
      if (s.block == "step" && s.start <= lb.start + 1e-6 && s.end >= lb.end - 1e-6) {
        t0 = s.start, t1 = s.end, framed = true;
        break;
      }
    }
  }
  double first = lb.start;
  for (int i = lastBlock; i >= 0; --i) {
    const Span& s = spans[i];
    if (s.block == "step") continue;
    // Without a frame: the blocks back to the first gap of half a second.
    if (framed ? s.end < t0 - 1e-6 : first - s.end > 0.5) break;
    if (framed && s.start < t0 - 1e-6) continue;
    first = std::min(first, s.start);
    spans_.push_front(s);
  }
  t0_ = framed ? t0 : first;
  t1_ = std::max(t1, t0_ + 1e-6);
  QWidget::update();
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  const int left = 80, laneH = std::max(14, (height() - 20) / static_cast<int>(kLanes.size()));
  p.setPen(palette().text().color());
  for (int i = 0; i < kLanes.size(); ++i)
    p.drawText(4, 10 + i * laneH + laneH / 2 + 4, kLaneNames[i]);
  if (spans_.isEmpty()) {
    p.drawText(rect().adjusted(left, 0, 0, 0), Qt::AlignCenter, tr("no timeline spans yet"));
    return;
  }
  const double w = width() - left - 8;
  int maxLayer = 1;
  for (const Span& s : spans_) maxLayer = std::max(maxLayer, s.layer + 1);
  for (const Span& s : spans_) {
    const int lane = laneOf(s.phase);
    if (lane < 0) continue;
    const double x0 = left + (s.start - t0_) / (t1_ - t0_) * w;
    const double x1 = left + (s.end - t0_) / (t1_ - t0_) * w;
    QColor c = QColor::fromHsv(s.layer < 0 ? 0 : 200 - 160 * s.layer / maxLayer,
                               s.layer < 0 ? 0 : 160, 200);
    if (s.phase == "backward") c = c.darker(130);
    p.fillRect(QRectF(x0, 10 + lane * laneH + 2, std::max(1.0, x1 - x0), laneH - 4), c);
  }
  p.setPen(palette().text().color());
  p.drawText(left, height() - 4, tr("%1 ms shown").arg((t1_ - t0_) * 1e3, 0, 'f', 1));
}

}  // namespace spillway::ui

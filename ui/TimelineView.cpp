#include "TimelineView.h"

#include <QPainter>
#include <cmath>

namespace spillway::ui {
namespace {
const QStringList kLanes = {"ssd_read", "h2d", "compute", "d2h", "optimizer", "ssd_write"};
const QStringList kLaneNames = {"SSD→DRAM", "H2D", "compute", "D2H", "optimizer", "DRAM→SSD"};

// Layer depth as a hue from blue (first) to orange (last); backward passes darker; blocks that
// are not a layer grey.
QColor layerColor(int layer, int layers) {
  return QColor::fromHsv(layer < 0 ? 0 : 200 - 160 * layer / std::max(1, layers), layer < 0 ? 0 : 160,
                         200);
}

// A tick step of 1, 2 or 5 x 10^k that gives at most `maxTicks` ticks over `span`.
double tickStep(double span, int maxTicks) {
  const double raw = span / std::max(1, maxTicks);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

constexpr int kLeft = 80;    // lane names
constexpr int kAxisH = 18;   // ticks and their labels
constexpr int kLegendH = 16;

int laneOf(const QString& phase) {
  if (phase == "forward" || phase == "backward" || phase == "compute") return 2;
  return static_cast<int>(kLanes.indexOf(phase));
}
}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent) {
  setMinimumHeight(120);  // six lanes of 10 px, the axis and the legend
}

QSize TimelineView::minimumSizeHint() const {
  return {360, 120};
}

QVector<double> TimelineView::ticks() const {
  QVector<double> out;
  if (spans_.isEmpty()) return out;
  const double span = t1_ - t0_;
  const int maxTicks = std::max(2, (width() - kLeft - 8) / 90);  // labels 90 px apart at least
  const double step = tickStep(span, maxTicks);
  for (int i = 0; i * step <= span * (1 + 1e-9); ++i) out << i * step;
  return out;
}

QStringList TimelineView::tickLabels() const {
  QStringList out;
  const QVector<double> t = ticks();
  const double step = t.size() > 1 ? t[1] - t[0] : 1;
  // Whole milliseconds where the step allows; the unit once, on the last tick.
  const int decimals = step * 1e3 >= 1 ? 0 : static_cast<int>(std::ceil(-std::log10(step * 1e3)));
  for (int i = 0; i < t.size(); ++i)
    out << QString::number(t[i] * 1e3, 'f', decimals) + (i + 1 == t.size() ? tr(" ms") : QString());
  return out;
}

QStringList TimelineView::legend() const {
  if (spans_.isEmpty()) return {};
  int layers = 0;
  for (const Span& s : spans_) layers = std::max(layers, s.layer + 1);
  return {tr("layer 0"), tr("layer %1").arg(std::max(0, layers - 1)), tr("backward (darker)"),
          tr("embed / head / step")};
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
  const int lanesH = height() - kAxisH - kLegendH - 10;
  const int laneH = std::max(10, lanesH / static_cast<int>(kLanes.size()));
  const QColor text = palette().text().color();
  p.setPen(text);
  for (int i = 0; i < kLanes.size(); ++i)
    p.drawText(4, 10 + i * laneH + laneH / 2 + 4, kLaneNames[i]);
  if (spans_.isEmpty()) {
    p.drawText(rect().adjusted(kLeft, 0, 0, 0), Qt::AlignCenter, tr("no timeline spans yet"));
    return;
  }
  const double w = width() - kLeft - 8;
  int layers = 1;
  for (const Span& s : spans_) layers = std::max(layers, s.layer + 1);
  for (const Span& s : spans_) {
    const int lane = laneOf(s.phase);
    if (lane < 0) continue;
    const double x0 = kLeft + (s.start - t0_) / (t1_ - t0_) * w;
    const double x1 = kLeft + (s.end - t0_) / (t1_ - t0_) * w;
    QColor c = layerColor(s.layer, layers);
    if (s.phase == "backward") c = c.darker(130);
    p.fillRect(QRectF(x0, 10 + lane * laneH + 2, std::max(1.0, x1 - x0), laneH - 4), c);
  }
  // Time axis: ms from the start of the step shown.
  const int axisY = 10 + static_cast<int>(kLanes.size()) * laneH + 2;
  QColor grid = text;
  grid.setAlpha(90);
  p.setPen(grid);
  p.drawLine(kLeft, axisY, kLeft + static_cast<int>(w), axisY);
  const QVector<double> t = ticks();
  const QStringList labels = tickLabels();
  const QFontMetrics fm(font());
  for (int i = 0; i < t.size(); ++i) {
    const int x = kLeft + static_cast<int>(t[i] / (t1_ - t0_) * w);
    p.setPen(grid);
    p.drawLine(x, axisY, x, axisY + 4);
    p.setPen(text);
    const int tw = fm.horizontalAdvance(labels[i]);
    p.drawText(std::clamp(x - tw / 2, kLeft - 4, width() - tw - 2), axisY + 4 + fm.ascent(),
               labels[i]);
  }
  // Legend: the colour ramp's ends, backward, and the other blocks.
  const QStringList names = legend();
  const QColor swatches[] = {layerColor(0, layers), layerColor(layers - 1, layers),
                             layerColor(0, layers).darker(130), layerColor(-1, layers)};
  int x = kLeft;
  const int y = height() - kLegendH + 2;
  for (int i = 0; i < names.size(); ++i) {
    p.fillRect(QRect(x, y + 2, 12, 9), swatches[i]);
    p.setPen(text);
    p.drawText(x + 16, y + fm.ascent() - 1, names[i]);
    x += 16 + fm.horizontalAdvance(names[i]) + 14;
  }
}

}  // namespace spillway::ui

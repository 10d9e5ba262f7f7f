#include "Charts.h"

#include <qcustomplot.h>

#include <cmath>

#include "PlotTheme.h"

namespace spillway::ui {

QCPTextElement* addPlotTitle(QCustomPlot* plot, const QString& title) {
  plot->plotLayout()->insertRow(0);
  auto* heading = new QCPTextElement(plot, title, QFont(plot->font().family(), 10, QFont::Bold));
  plot->plotLayout()->addElement(0, 0, heading);
  return heading;
}

void placeLegendBelow(QCustomPlot* plot, int columns) {
  plot->legend->setVisible(true);
  plot->legend->setFont(QFont(plot->font().family(), 7));
  plot->legend->setIconSize(12, 7);
  plot->legend->setRowSpacing(0);
  plot->legend->setColumnSpacing(4);
  plot->legend->setBorderPen(Qt::NoPen);
  plot->legend->setBrush(Qt::NoBrush);
  plot->axisRect()->insetLayout()->take(plot->legend);
  plot->plotLayout()->addElement(plot->plotLayout()->rowCount(), 0, plot->legend);
  plot->plotLayout()->setRowStretchFactor(plot->plotLayout()->rowCount() - 1, 0.001);
  plot->legend->setFillOrder(QCPLayoutGrid::foColumnsFirst);
  plot->legend->setWrap(columns);
  plot->legend->setMargins(QMargins(2, 0, 2, 0));
  PlotTheme::follow(plot);
}

QCustomPlot* titledPlot(const QString& title, const QString& xLabel, const QString& yLabel,
                        int legendColumns, int minHeight) {
  auto* p = new QCustomPlot;
  addPlotTitle(p, title);
  p->xAxis->setLabel(xLabel);
  p->yAxis->setLabel(yLabel);
  placeLegendBelow(p, legendColumns);
  p->setMinimumHeight(minHeight);
  return p;
}

QVector<double> smoothEma(const QVector<double>& y, double weight) {
  QVector<double> out;
  smoothEma(y, weight, out);
  return out;
}

void smoothEma(const QVector<double>& y, double weight, QVector<double>& out) {
  out.resize(y.size());
  double last = 0, debias = 0;
  for (int i = 0; i < y.size(); ++i) {
    last = last * weight + (1 - weight) * y[i];
    debias = debias * weight + (1 - weight);
    out[i] = last / debias;
  }
}

void setDecimatedData(QCPGraph* graph, const QVector<double>& x, const QVector<double>& y,
                      double scale, int maxPoints) {
  const qsizetype n = x.size();
  const qsizetype offset = n - y.size();  // x's points before y's first value
  const auto value = [&](qsizetype i) { return i < offset ? 0.0 : y[i - offset] * scale; };
  QVector<QCPGraphData> out;
  if (n <= maxPoints) {
    out.reserve(n);
    for (qsizetype i = 0; i < n; ++i) out.append(QCPGraphData(x[i], value(i)));
    graph->data()->set(out, true);
    return;
  }
  // Runs of `stride` points from the first: a run's bounds move only when the stride grows, so the
  // line does not shimmer from one tick to the next.
  const qsizetype runs = std::max(1, maxPoints / 2);
  const qsizetype stride = (n + runs - 1) / runs;
  out.reserve(2 * runs + 8);
  qsizetype lo = -1, hi = -1, lastOut = -1;
  const auto flush = [&] {
    if (lo < 0) return;
    const qsizetype a = std::min(lo, hi), b = std::max(lo, hi);
    out.append(QCPGraphData(x[a], value(a)));
    if (b != a) out.append(QCPGraphData(x[b], value(b)));
    lastOut = b;
    lo = hi = -1;
  };
  for (qsizetype start = 0; start < n; start += stride) {
    const qsizetype end = std::min(n, start + stride);
    for (qsizetype i = start; i < end; ++i) {
      const double v = value(i);
      if (std::isnan(v)) {  // a line break: the points before it, the break, then the rest
        flush();
        out.append(QCPGraphData(x[i], v));
        lastOut = i;
        continue;
      }
      if (lo < 0 || v < value(lo)) lo = i;
      if (hi < 0 || v > value(hi)) hi = i;
    }
    flush();
  }
  if (lastOut != n - 1) out.append(QCPGraphData(x[n - 1], value(n - 1)));
  graph->data()->set(out, true);
}

void fitValueAxis(QCPAxis* axis) {
  bool any = false;
  QCPRange range;
  for (QCPGraph* g : axis->graphs()) {
    if (!g->visible()) continue;
    bool found = false;
    const QCPRange r = g->getValueRange(found);
    if (!found) continue;
    range = any ? QCPRange(std::min(range.lower, r.lower), std::max(range.upper, r.upper)) : r;
    any = true;
  }
  if (!any) return;
  const double mid = range.center();
  const double flat = 1e-9 * std::max(std::abs(range.lower), std::abs(range.upper));
  if (range.size() > flat) {
    axis->setRange(range);
  } else {
    const double half = mid != 0 ? std::abs(mid) / 2 : 1.0;
    axis->setRange(mid - half, mid + half);
  }
}

void resetAxes(QCustomPlot* plot) {
  for (QCPAxis* axis : plot->axisRect()->axes()) axis->setRange(0, 1);
}

}  // namespace spillway::ui

#include "TierChart.h"

#include "Charts.h"

#include <algorithm>

#include "Format.h"
#include "PlotTheme.h"

namespace spillway::ui {

const QStringList& categoryNames() {
  static const QStringList names = {"weights",   "gradients",   "master",
                                    "optimizer", "checkpoints", "workspace"};
  return names;
}

QColor categoryColor(const QString& c) {
  static const QMap<QString, QColor> colors = {
      {"weights", QColor("#1f77b4")},     {"gradients", QColor("#ff7f0e")},
      {"master", QColor("#2ca02c")},      {"optimizer", QColor("#9467bd")},
      {"checkpoints", QColor("#8c564b")}, {"workspace", QColor("#7f7f7f")}};
  return colors.value(c, Qt::gray);
}

TierChart::TierChart(const QString& tier, const QString& title, QWidget* parent)
    : QCustomPlot(parent), tier_(tier), title_(title) {
  heading_ = addPlotTitle(this, title);
  xAxis->setLabel(tr("time (s)"));
  yAxis->setLabel(tr("GB"));
  for (const QString& c : categoryNames()) {
    QCPGraph* g = addGraph();
    g->setName(c);
    QColor col = categoryColor(c);
    g->setPen(QPen(col));
    col.setAlpha(150);
    g->setBrush(QBrush(col));
    if (!layers_.isEmpty()) g->setChannelFillGraph(layers_.last());
    layers_.push_back(g);
  }
  capacity_ = addGraph();
  capacity_->setName(tr("capacity"));
  capacity_->setPen(QPen(Qt::red, 1.5, Qt::DashLine));
  measured_ = addGraph();
  measured_->setName(tr("in use on the device"));
  measured_->setPen(QPen(palette().color(QPalette::WindowText), 1.5));
  measured_->setVisible(false);
  placeLegendBelow(this, 4);
  measured_->removeFromLegend();
  unavailable_ = new QCPItemText(this);
  unavailable_->position->setType(QCPItemPosition::ptAxisRectRatio);
  unavailable_->position->setCoords(0.5, 0.5);
  unavailable_->setText(tr("unavailable"));
  unavailable_->setColor(palette().color(QPalette::PlaceholderText));
  setMinimumHeight(150);
}

QString TierChart::heading() const {
  return heading_->text();
}

bool TierChart::measuredShown() const {
  return measured_->visible();
}

void TierChart::update(const RunSeries& series) {
  const auto tierIt = series.tierBytes.find(tier_);
  // Stack the categories in bytes first; the unit is chosen from the top of the stack.
  QVector<double> x, base;
  QVector<QVector<double>> stacked;
  // The time axis: the first category reported (a tier may leave out the ones it never holds).
  if (tierIt != series.tierBytes.end()) {
    for (const QString& c : categoryNames()) {
      if (tierIt->contains(c) && !(*tierIt)[c].isEmpty()) {
        x = (*tierIt)[c].x;
        break;
      }
    }
  }
  for (const QString& c : categoryNames()) {
    QVector<double> y;
    if (tierIt != series.tierBytes.end() && tierIt->contains(c)) y = (*tierIt)[c].y;
    // The worker writes every category in each sample, so the rings line up; align on the newest.
    QVector<double> aligned(x.size(), 0.0);
    for (int k = 0; k < std::min(y.size(), x.size()); ++k)
      aligned[x.size() - 1 - k] = y[y.size() - 1 - k];
    if (base.size() != x.size()) base = QVector<double>(x.size(), 0.0);
    for (int k = 0; k < x.size(); ++k) base[k] += aligned[k];
    stacked.push_back(base);
  }
  const Ring measured = series.tierMeasuredBytes.value(tier_);
  double top = base.isEmpty() ? 0 : *std::max_element(base.begin(), base.end());
  for (double v : measured.y) top = std::max(top, v);
  const double capBytes = series.tierCapacity.value(tier_, 0);
  const bool showCap = capBytes > 0 && top >= 0.05 * capBytes;
  const ByteUnit unit = byteUnitFor(showCap ? capBytes : top);
  for (int i = 0; i < stacked.size(); ++i) {
    QVector<double> y = stacked[i];
    for (double& v : y) v /= unit.bytes;
    layers_[i]->setData(x, y, true);
  }
  const double cap = capBytes / unit.bytes;
  const QVector<double>& tx = x.isEmpty() ? measured.x : x;  // the time axis of what is shown
  if (showCap && !tx.isEmpty()) {
    capacity_->setData({tx.first(), tx.last()}, {cap, cap}, true);
  } else {
    capacity_->data()->clear();
  }
  QVector<double> my = measured.y;
  for (double& v : my) v /= unit.bytes;
  measured_->setData(measured.x, my, true);
  if (measured_->visible() != !measured.isEmpty()) {
    measured_->setVisible(!measured.isEmpty());
    measured.isEmpty() ? measured_->removeFromLegend() : measured_->addToLegend();
  }
  yAxis->setLabel(unit.name);
  unavailable_->setVisible(x.isEmpty() && measured.isEmpty());
  // The CPU backend has no HBM: its "device" is an arena it carves out of host memory, sized for
  // the run, so it reads as an arena rather than as a full GPU.
  const bool cpuArena = tier_ == "hbm" && series.plan["backend"].toString() == "cpu";
  QString text = cpuArena ? tr("Device arena (CPU backend, in DRAM)") : title_;
  if (!x.isEmpty()) text += tr(": %1").arg(formatBytes(base.last()));
  if (capBytes > 0)
    text += cpuArena ? tr(" of a %1 arena").arg(formatBytes(capBytes)) : tr(" of %1").arg(formatBytes(capBytes));
  if (!measured.isEmpty()) text += tr(" · %1 in use on the device").arg(formatBytes(measured.lastY()));
  heading_->setText(text);
  if (!tx.isEmpty()) xAxis->setRange(tx.first(), std::max(tx.last(), tx.first() + 1));
  yAxis->setRange(
      0, top > 0 || showCap ? std::max(top / unit.bytes * 1.15, showCap ? cap * 1.05 : 0.0) : 1.0);
  replot(rpQueuedReplot);
}

}  // namespace spillway::ui

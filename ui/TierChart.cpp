#include "TierChart.h"

#include <algorithm>

#include "Charts.h"
#include "Format.h"
#include "PlotTheme.h"

namespace spillway::ui {

const QStringList& categoryNames() {
  static const QStringList names = {"weights",   "gradients",   "master",
                                    "optimizer", "checkpoints", "workspace"};
  return names;
}

const QStringList& categoryNames(const QString& tier) {
  static const QStringList device = {"weights",     "gradients",   "state",
                                     "checkpoints", "activations", "workspace"};
  return tier == QLatin1String("hbm") ? device : categoryNames();
}

bool shownWhenHeld(const QString& category) {
  return category == QLatin1String("state") || category == QLatin1String("activations");
}

QColor categoryColor(const QString& c) {
  static const QMap<QString, QColor> colors = {
      {"weights", QColor("#1f77b4")},     {"gradients", QColor("#ff7f0e")},
      {"master", QColor("#2ca02c")},      {"optimizer", QColor("#9467bd")},
      {"checkpoints", QColor("#8c564b")}, {"workspace", QColor("#7f7f7f")},
      {"state", QColor("#17becf")},       {"activations", QColor("#bcbd22")}};
  return colors.value(c, Qt::gray);
}

TierChart::TierChart(const QString& tier, const QString& title, QWidget* parent)
    : QCustomPlot(parent), tier_(tier), title_(title) {
  heading_ = addPlotTitle(this, title);
  xAxis->setLabel(tr("time (s)"));
  yAxis->setLabel(tr("GB"));
  for (const QString& c : categoryNames(tier)) {
    QCPGraph* g = addGraph();
    g->setName(c == QLatin1String("state")         ? tr("state tier")
               : c == QLatin1String("activations") ? tr("saved activations")
                                                   : c);
    QColor col = categoryColor(c);
    g->setPen(QPen(col));
    col.setAlpha(150);
    g->setBrush(QBrush(col));
    if (!layers_.isEmpty()) g->setChannelFillGraph(layers_.last());
    layers_.push_back(g);
  }
  for (int i = 0; i < layers_.size(); ++i) {
    if (!shownWhenHeld(categoryNames(tier)[i])) continue;
    layers_[i]->setVisible(false);  // until a sample holds some there
    layers_[i]->removeFromLegend();
  }
  capacity_ = addGraph();
  capacity_->setName(tr("capacity"));
  capacity_->setPen(QPen(Qt::red, 1.5, Qt::DashLine));
  measured_ = addGraph();
  measured_->setName(tr("in use on the device"));
  measured_->setPen(QPen(palette().color(QPalette::WindowText), 1.5));
  measured_->setVisible(false);
  placeLegendBelow(this, 4);
  // The stacked areas' edges without antialiasing: a long run's jagged polygons cost most of the
  // chart's paint antialiased, and the lines over them keep their antialiasing.
  setNotAntialiasedElements(QCP::aeFills);
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

std::optional<double> TierChart::newestBytes(const QString& category) const {
  const auto it = newest_.find(category);
  if (it == newest_.end()) return std::nullopt;
  return *it;
}

bool TierChart::categoryShown(const QString& category) const {
  const int i = categoryNames(tier_).indexOf(category);
  return i >= 0 && layers_[i]->visible() && legend->hasItemWithPlottable(layers_[i]);
}

QStringList TierChart::gpuLines() const {
  QStringList names;
  for (QCPGraph* g : gpuLines_)
    if (g->visible()) names << g->name();
  return names;
}

bool TierChart::measuredShown() const {
  return measured_->visible();
}

void TierChart::update(const RunSeries& series) {
  const auto tierIt = series.tierBytes.find(tier_);
  // The time axis: the first category reported (a tier may leave out the ones it never holds).
  QVector<double> x;
  QVector<QVector<double>> ys;  // by category; shared with the rings, not copied
  if (tierIt != series.tierBytes.end()) {
    for (const QString& c : categoryNames(tier_)) {
      const auto it = tierIt->find(c);
      if (x.isEmpty() && it != tierIt->end() && !it->isEmpty()) x = it->x;
      ys.push_back(it != tierIt->end() ? it->y : QVector<double>());
    }
  }
  const qsizetype n = x.size();
  // The worker writes every category in each sample, so the rings line up; align on the newest.
  const auto at = [&](int c, qsizetype i) {
    const QVector<double>& y = ys[c];
    const qsizetype k = i - (n - y.size());
    return k >= 0 && k < y.size() ? y[k] : 0.0;
  };
  // The top of the stack over every sample; the stack drawn at a bounded number of them (every
  // stride-th and the newest, the same for each category so that the areas line up).
  double top = 0, newest = 0;
  for (qsizetype i = 0; i < n; ++i) {
    double sum = 0;
    for (int c = 0; c < ys.size(); ++c) sum += at(c, i);
    top = std::max(top, sum);
    if (i == n - 1) newest = sum;
  }
  const qsizetype stride = std::max<qsizetype>(1, (n + kMaxDrawnPoints - 1) / kMaxDrawnPoints);
  QVector<qsizetype> shown;
  for (qsizetype i = 0; i < n; i += stride) shown.push_back(i);
  if (n > 0 && shown.last() != n - 1) shown.push_back(n - 1);
  const Ring measured = series.tierMeasuredBytes.value(tier_);
  for (double v : measured.y) top = std::max(top, v);
  // Several GPUs: each one's memory in use as a line of its own ("GPU 0", "GPU 1") beside their
  // sum; one GPU's line would be the sum's.
  const bool perGpu = tier_ == QLatin1String("hbm") && series.gpuHbmBytes.size() >= 2;
  if (perGpu)
    for (const Ring& r : series.gpuHbmBytes)
      for (double v : r.y) top = std::max(top, v);
  const double capBytes = series.tierCapacity.value(tier_, 0);
  const bool showCap = capBytes > 0 && top >= 0.05 * capBytes;
  const ByteUnit unit = byteUnitFor(showCap ? capBytes : top);
  QVector<double> base(shown.size(), 0.0);
  newest_.clear();
  for (int i = 0; i < layers_.size(); ++i) {
    QVector<QCPGraphData> d;
    if (i < ys.size()) {
      d.reserve(shown.size());
      for (qsizetype k = 0; k < shown.size(); ++k) {
        base[k] += at(i, shown[k]);
        d.append(QCPGraphData(x[shown[k]], base[k] / unit.bytes));
      }
      if (!ys[i].isEmpty()) newest_[categoryNames(tier_)[i]] = ys[i].last();
    }
    layers_[i]->data()->set(d, true);
    // The HBM state tier and the saved activations drawn, and in the legend in their place in the
    // stack, only where the run has them: a run without, or from before them, shows the device as
    // it always did.
    if (shownWhenHeld(categoryNames(tier_)[i])) {
      const bool held =
          i < ys.size() && std::any_of(ys[i].begin(), ys[i].end(), [](double v) { return v > 0; });
      if (held != layers_[i]->visible()) {
        layers_[i]->setVisible(held);
        legend->clearItems();
        for (QCPGraph* g : layers_)
          if (g->visible()) g->addToLegend();
        capacity_->addToLegend();
        if (measured_->visible()) measured_->addToLegend();
        for (QCPGraph* g : gpuLines_)
          if (g->visible()) g->addToLegend();
      }
    }
  }
  const double cap = capBytes / unit.bytes;
  const QVector<double>& tx = x.isEmpty() ? measured.x : x;  // the time axis of what is shown
  if (showCap && !tx.isEmpty()) {
    capacity_->setData({tx.first(), tx.last()}, {cap, cap}, true);
  } else {
    capacity_->data()->clear();
  }
  setDecimatedData(measured_, measured.x, measured.y, 1 / unit.bytes);
  if (measured_->visible() != !measured.isEmpty()) {
    measured_->setVisible(!measured.isEmpty());
    measured.isEmpty() ? measured_->removeFromLegend() : measured_->addToLegend();
  }
  int k = 0;
  if (perGpu) {
    static const QColor kGpuColors[] = {QColor("#17becf"), QColor("#bcbd22"), QColor("#e377c2"),
                                        QColor("#7f7f7f"), QColor("#8c564b"), QColor("#9467bd"),
                                        QColor("#ff9896"), QColor("#98df8a")};
    for (auto it = series.gpuHbmBytes.cbegin(); it != series.gpuHbmBytes.cend(); ++it, ++k) {
      if (k == gpuLines_.size()) {
        QCPGraph* g = addGraph();
        g->setPen(QPen(kGpuColors[k % std::size(kGpuColors)], 1.5, Qt::DashDotLine));
        gpuLines_ << g;
      }
      setDecimatedData(gpuLines_[k], it->x, it->y, 1 / unit.bytes);
      gpuLines_[k]->setName(tr("GPU %1").arg(it.key()));
      gpuLines_[k]->setVisible(true);
      gpuLines_[k]->addToLegend();  // no-op when it is there
    }
  }
  for (; k < gpuLines_.size(); ++k) {
    gpuLines_[k]->setVisible(false);
    gpuLines_[k]->removeFromLegend();
  }
  yAxis->setLabel(unit.name);
  unavailable_->setVisible(x.isEmpty() && measured.isEmpty());
  // The CPU backend has no HBM: its "device" is an arena it carves out of host memory, sized for
  // the run, so it reads as an arena rather than as a full GPU.
  const bool cpuArena = tier_ == "hbm" && series.plan && series.plan->on_cpu();
  // Short enough for a third of a 1280-pixel window; the device's own reading goes on a second
  // line.
  QString text = cpuArena ? tr("Arena (CPU, in DRAM)") : title_;
  if (!x.isEmpty()) text += tr(": %1").arg(formatBytes(newest));
  if (capBytes > 0) text += tr(" of %1").arg(formatBytes(capBytes));
  if (!measured.isEmpty())
    text += tr("\n%1 in use on the device").arg(formatBytes(measured.lastY()));
  heading_->setText(text);
  if (!tx.isEmpty()) xAxis->setRange(tx.first(), std::max(tx.last(), tx.first() + 1));
  yAxis->setRange(
      0, top > 0 || showCap ? std::max(top / unit.bytes * 1.15, showCap ? cap * 1.05 : 0.0) : 1.0);
  replot(rpQueuedReplot);
}

}  // namespace spillway::ui

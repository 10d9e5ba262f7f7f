#include "TimelineView.h"

#include <QComboBox>
#include <QHelpEvent>
#include <QPainter>
#include <QSignalBlocker>
#include <QToolTip>
#include <algorithm>
#include <cmath>
#include <limits>

namespace spillway::ui {
namespace {
const QStringList kLanes = {"ssd_read", "h2d",       "compute",  "reduce",
                            "d2h",      "optimizer", "ssd_write"};
const QStringList kLaneNames = {"SSD→DRAM", "H2D",       "compute", "reduce",
                                "D2H",      "optimizer", "DRAM→SSD"};
constexpr int kCompute = 2;
// The lanes of the GPU's own work, whose spans a data-parallel run tags with the GPU.
const QStringList kDeviceLanes = {"h2d", "compute", "reduce", "d2h"};
constexpr double kEps = 1e-9;
// Compute idle under this share of the frame: the step is compute-bound.
constexpr double kComputeBound = 0.03;

// Layer depth as a hue from blue (first) to orange (last); backward passes darker; blocks that
// are not a layer grey.
QColor layerColor(int layer, int layers) {
  return QColor::fromHsv(layer < 0 ? 0 : 200 - 160 * layer / std::max(1, layers),
                         layer < 0 ? 0 : 160, 200);
}

// A tick step of 1, 2 or 5 x 10^k that gives at most `maxTicks` ticks over `span`.
double tickStep(double span, int maxTicks) {
  const double raw = span / std::max(1, maxTicks);
  const double mag = std::pow(10.0, std::floor(std::log10(raw)));
  for (double m : {1.0, 2.0, 5.0, 10.0})
    if (m * mag >= raw) return m * mag;
  return 10 * mag;
}

constexpr int kLeft = 80;   // lane names
constexpr int kAxisH = 18;  // ticks and their labels
constexpr int kLegendH = 16;
// The lanes' least height: six lanes of 12 px, or seven of 10 px with the reduce lane, so that a
// data-parallel run's timeline needs no more of the window than a one-GPU run's.
constexpr int kLanesMinH = 6 * 12;
constexpr int kLaneMinH = 10;

int laneOf(const QString& phase) {
  if (phase == "forward" || phase == "backward" || phase == "compute") return kCompute;
  return static_cast<int>(kLanes.indexOf(phase));
}

bool isStep(const Span& s) {
  return s.block == "step";
}

// The union of [a, b) intervals: sorted, overlapping and touching ones merged.
QVector<QPair<double, double>> merged(QVector<QPair<double, double>> v) {
  std::sort(v.begin(), v.end());
  QVector<QPair<double, double>> out;
  for (const auto& iv : v) {
    if (!out.isEmpty() && iv.first <= out.back().second) {
      out.back().second = std::max(out.back().second, iv.second);
    } else {
      out << iv;
    }
  }
  return out;
}

double length(const QVector<QPair<double, double>>& v) {
  double n = 0;
  for (const auto& iv : v) n += iv.second - iv.first;
  return n;
}

// The length of the intersection of two sorted, disjoint interval lists.
double overlap(const QVector<QPair<double, double>>& a, const QVector<QPair<double, double>>& b) {
  double n = 0;
  for (int i = 0, j = 0; i < a.size() && j < b.size();) {
    n += std::max(0.0, std::min(a[i].second, b[j].second) - std::max(a[i].first, b[j].first));
    if (a[i].second < b[j].second) {
      ++i;
    } else {
      ++j;
    }
  }
  return n;
}

// A share as a percentage with `decimals` decimals; "<1%" for a small non-zero share shown whole.
QString percent(double share, int decimals = 0) {
  const double p = 100 * share;
  if (decimals == 0 && p > 0 && p < 0.5) return QStringLiteral("<1%");
  return QString::number(p, 'f', decimals) + "%";
}
}  // namespace

TimelineView::TimelineView(QWidget* parent) : QWidget(parent), chooser_(new QComboBox(this)) {
  chooser_->setObjectName("timelineGpu");
  chooser_->setToolTip(
      tr("The GPU whose H2D, compute, reduce and D2H lanes are drawn; the optimizer's and the "
         "SSD's lanes are the host's, one for every GPU"));
  chooser_->setSizeAdjustPolicy(QComboBox::AdjustToContents);
  chooser_->hide();
  // Only the user's choice (or a test's) comes through: updateChooser blocks the signal.
  connect(chooser_, &QComboBox::currentIndexChanged, this, [this](int index) {
    if (index >= 0) setDevice(chooser_->itemData(index).toInt());
  });
  setMinimumHeight(minimumSizeHint().height());
}

QSize TimelineView::minimumSizeHint() const {
  // The summary line (and the chooser), the lanes, the axis and the legend (as paintEvent lays
  // them out).
  const int lanesH = std::max(kLanesMinH, kLaneMinH * static_cast<int>(shownLanes().size()));
  return {360, lanesTop() + lanesH + kAxisH + kLegendH + 4};
}

int TimelineView::lanesTop() const {
  const int line = fontMetrics().height() + 6;
  return chooser_->isHidden() ? line : std::max(line, chooser_->sizeHint().height() + 4);
}

int TimelineView::laneHeight() const {
  const int lanesH = height() - lanesTop() - kAxisH - kLegendH - 4;
  return std::max(kLaneMinH, lanesH / static_cast<int>(shownLanes().size()));
}

QStringList TimelineView::lanes() {
  return kLanes;
}

QStringList TimelineView::shownLanes() const {
  QStringList out = kLanes;
  if (!reduce_) out.removeAll("reduce");
  return out;
}

QString TimelineView::laneAt(const QPoint& pos) const {
  const QStringList shown = shownLanes();
  const int top = lanesTop(), laneH = laneHeight();
  if (pos.y() < top || pos.x() < 0 || pos.x() >= width()) return {};
  const int row = (pos.y() - top) / laneH;
  return row < shown.size() ? shown[row] : QString();
}

QString TimelineView::laneToolTip(const QString& lane) const {
  const int i = static_cast<int>(kLanes.indexOf(lane));
  if (i < 0) return {};
  const QString what =
      lane == "ssd_read"    ? tr("optimizer state read from the SSD into DRAM")
      : lane == "h2d"       ? tr("weights uploaded to the GPU, block by block")
      : lane == "compute"   ? tr("each block's forward and backward (backward darker)")
      : lane == "reduce"    ? tr("collectives between GPUs: each block's gradient summed over "
                                    "the GPUs by NCCL before its D2H (past one machine also its "
                                    "weights, broadcast from the machine that holds them)")
      : lane == "d2h"       ? (reduce_ ? tr("this GPU's share of the gradients "
                                                  "downloaded to DRAM")
                                       : tr("gradients downloaded to DRAM"))
      : lane == "optimizer" ? tr("AdamW updating the weights on the host")
                            : tr("optimizer state written back to the SSD");
  QString tip = kLaneNames[i] + ": " + what;
  if (devices_.size() > 1)
    tip += kDeviceLanes.contains(lane) ? tr(" (%1's)").arg(chooser_->currentText())
                                       : tr(" (the host's, for every GPU)");
  return tip;
}

void TimelineView::setDevice(int device) {
  if (device == device_ || !devices_.contains(device)) return;
  device_ = device;
  {
    const QSignalBlocker quiet(chooser_);
    chooser_->setCurrentIndex(chooser_->findData(device));
  }
  frame();
}

void TimelineView::setComputeName(const QString& name) {
  if (name == computeName_) return;
  computeName_ = name;
  updateChooser();
  setToolTip(summary());
  QWidget::update();
}

void TimelineView::updateChooser() {
  // GPUs by their CUDA index; the CPU backend's ranks by their rank.
  const QString unit = computeName_ == "CPU" ? tr("CPU rank %1") : tr("GPU %1");
  const QSignalBlocker quiet(chooser_);
  QList<int> listed;
  for (int i = 0; i < chooser_->count(); ++i) listed << chooser_->itemData(i).toInt();
  if (listed != devices_ ||
      (!devices_.isEmpty() && chooser_->itemText(0) != unit.arg(devices_[0]))) {
    chooser_->clear();
    for (int d : devices_) chooser_->addItem(unit.arg(d), d);
  }
  chooser_->setCurrentIndex(chooser_->findData(device_));
  const bool show = devices_.size() > 1;
  if (show != !chooser_->isHidden()) {
    chooser_->setVisible(show);
    setMinimumHeight(minimumSizeHint().height());
    updateGeometry();
  }
  chooser_->resize(chooser_->sizeHint());
  chooser_->move(4, 2);
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

void TimelineView::setSpans(const QVector<Span>& spans, double window, const Ring* stepTimes,
                            bool runOver) {
  given_ = spans;
  windowSeconds_ = window;
  hasStepTimes_ = stepTimes != nullptr;
  stepTimes_ = stepTimes ? *stepTimes : Ring();
  runOver_ = runOver;
  QList<int> devices;
  bool reduce = false;
  for (const Span& s : spans) {
    if (s.device >= 0) devices << s.device;
    reduce = reduce || s.phase == "reduce";
  }
  std::sort(devices.begin(), devices.end());
  devices.erase(std::unique(devices.begin(), devices.end()), devices.end());
  devices_ = devices;
  if (!devices_.contains(device_)) device_ = devices_.isEmpty() ? -1 : devices_.front();
  if (reduce != reduce_) {
    reduce_ = reduce;
    setMinimumHeight(minimumSizeHint().height());
    updateGeometry();
  }
  updateChooser();
  frame();
}

void TimelineView::frame() {
  // The chosen GPU's spans and the host's (every span, for one GPU).
  QVector<Span> spans;
  if (devices_.isEmpty()) {
    spans = given_;
  } else {
    for (const Span& s : given_)
      if (s.device < 0 || s.device == device_) spans << s;
  }
  const double window = windowSeconds_;
  const Ring* stepTimes = hasStepTimes_ ? &stepTimes_ : nullptr;
  const bool runOver = runOver_;
  spans_.clear();
  busy_.clear();
  stepEnd_ = -1;
  step_ = 0;
  window_ = false;
  int lastBlock = -1;
  for (int i = spans.size() - 1; i >= 0 && lastBlock < 0; --i) {
    if (!isStep(spans[i])) lastBlock = i;
  }
  if (lastBlock < 0) {
    setToolTip({});
    return QWidget::update();
  }
  double t0 = 0, t1 = 0;
  bool framed = false;
  if (window > 0) {
    t1 = spans[lastBlock].end, t0 = t1 - window;
    framed = window_ = true;
  } else {
    // The trainer records one "step" span per step (written after the step's block spans) and
    // the per-block spans of about one step a second; a step's optimizer runs after its step span,
    // beside the next step's forward, so a step's frame is complete once the next step span has
    // arrived.
    QVector<double> computeStarts;  // sorted, to find the detailed steps
    QVector<int> steps;             // indices of the step spans, in arrival order
    for (int i = 0; i < spans.size(); ++i) {
      if (isStep(spans[i])) {
        steps << i;
      } else if (laneOf(spans[i].phase) == kCompute) {
        computeStarts << spans[i].start;
      }
    }
    std::sort(computeStarts.begin(), computeStarts.end());
    auto detailed = [&](const Span& st) {
      auto it = std::lower_bound(computeStarts.begin(), computeStarts.end(), st.start - 1e-6);
      return it != computeStarts.end() && *it <= st.end + 1e-6;
    };
    // The end of the work that follows step span `k`'s end and starts before `limit`: its
    // gradients' D2H, its optimizer and the optimizer's SSD traffic (not the next step's H2D and
    // compute). Among the spans that arrived between the step spans around it, so that a resumed
    // run's earlier worker, whose times may overlap, is left out.
    auto tailEnd = [&](int k, double limit) {
      const Span& st = spans[steps[k]];
      double end = st.end;
      const int from = k > 0 ? steps[k - 1] + 1 : 0;
      const int to = k + 1 < steps.size() ? steps[k + 1] : static_cast<int>(spans.size());
      for (int i = from; i < to; ++i) {
        const Span& s = spans[i];
        const int lane = laneOf(s.phase);
        if (lane < 0 || lane == kCompute || kLanes[lane] == "h2d") continue;
        if (s.start >= st.end - 1e-6 && s.start < limit) end = std::max(end, s.end);
      }
      return end;
    };
    // Where the tail of step span `k` with no step span after it ends at the latest: the start of
    // the first backward after it (a step cut short by a stop, whose gradients' D2H are not this
    // step's); the next step's forward runs beside this step's optimizer and stays in the frame.
    auto tailLimit = [&](int k) {
      const Span& st = spans[steps[k]];
      double limit = std::numeric_limits<double>::infinity();
      for (int i = steps[k] + 1; i < spans.size(); ++i)
        if (spans[i].phase == "backward" && spans[i].start >= st.end - 1e-6)
          limit = std::min(limit, spans[i].start);
      return limit;
    };
    int chosen = -1, last = -1;
    for (int k = steps.size() - 1; k >= 0 && chosen < 0; --k) {
      const Span& st = spans[steps[k]];
      if (!detailed(st)) continue;
      // The run is over: its latest detailed step is complete, though no step span follows it.
      if (runOver && k + 1 == steps.size()) {
        last = k;
        break;
      }
      // A later step span that starts before this one comes from a new worker (a resume).
      if (k + 1 < steps.size() && spans[steps[k + 1]].start >= st.start) {
        const double next = spans[steps[k + 1]].start;
        chosen = k;
        t0 = st.start;
        // To the next step's start; earlier when this step's work was done long before it (a
        // checkpoint, an eval or a pause between the steps).
        t1 = std::min(next, std::max(tailEnd(k, next), st.end));
      } else if (last < 0) {
        last = k;
      }
    }
    if (chosen < 0 && last >= 0) {
      chosen = last;
      t0 = spans[steps[last]].start;
      t1 = tailEnd(last, tailLimit(last));
    }
    if (chosen >= 0) {
      framed = true;
      const Span& st = spans[steps[chosen]];
      stepEnd_ = st.end;
      // The step event follows its step span at once: the first one at or after its end.
      if (stepTimes) {
        int at = -1;
        for (int i = stepTimes->size() - 1; i >= 0 && stepTimes->y[i] >= st.end - 1e-3; --i) at = i;
        if (at >= 0 && stepTimes->y[at] <= st.end + 2.0)
          step_ = static_cast<qint64>(stepTimes->x[at]);
      }
    }
  }
  if (framed) {
    t1 = std::max(t1, t0 + 1e-6);
    for (const Span& s : spans) {
      if (isStep(s)) continue;
      // Overlapping the frame, or an instant inside it.
      if ((s.start < t1 && s.end > t0) || (s.start >= t0 && s.start < t1)) spans_ << s;
    }
    std::stable_sort(spans_.begin(), spans_.end(),
                     [](const Span& a, const Span& b) { return a.start < b.start; });
    t0_ = t0, t1_ = t1;
  } else {
    // Without a frame: the blocks back to the first gap of half a second.
    const Span& lb = spans[lastBlock];
    double first = lb.start;
    for (int i = lastBlock; i >= 0; --i) {
      const Span& s = spans[i];
      if (isStep(s)) continue;
      if (first - s.end > 0.5) break;
      first = std::min(first, s.start);
      spans_.push_front(s);
    }
    t0_ = first;
    t1_ = std::max(lb.end, t0_ + 1e-6);
  }
  measure();
  setToolTip(summary());  // whole, where a narrow window cuts the line
  QWidget::update();
}

void TimelineView::measure() {
  QVector<Intervals> raw(kLanes.size());
  for (const Span& s : spans_) {
    const int lane = laneOf(s.phase);
    const double a = std::max(s.start, t0_), b = std::min(s.end, t1_);
    if (lane >= 0 && b > a) raw[lane] << qMakePair(a, b);
  }
  busy_.clear();
  for (const Intervals& v : raw) busy_ << merged(v);
}

double TimelineView::laneBusyFraction(const QString& lane) const {
  const int i = static_cast<int>(kLanes.indexOf(lane));
  if (spans_.isEmpty() || i < 0 || i >= busy_.size()) return -1;
  return length(busy_[i]) / (t1_ - t0_);
}

QString TimelineView::limiter(QString* laneOut) const {
  if (spans_.isEmpty() || busy_.size() != kLanes.size()) return {};
  const double frame = t1_ - t0_;
  const double idleShare = 1 - length(busy_[kCompute]) / frame;
  // One decimal where the share is small enough for it to matter ("GPU idle 0.9%").
  const QString idle =
      tr("%1 idle %2")
          .arg(computeName_, percent(std::max(0.0, idleShare), idleShare < 0.1 ? 1 : 0));
  auto named = [&](const QString& lane, const QString& text) {
    if (laneOut) *laneOut = lane;
    return text;
  };
  if (idleShare < kComputeBound) return named("compute", tr("compute-bound (%1)").arg(idle));
  // Compute's idle time, and the lane busy during most of it.
  Intervals gaps;
  double at = t0_;
  for (const auto& iv : busy_[kCompute]) {
    if (iv.first > at) gaps << qMakePair(at, iv.first);
    at = std::max(at, iv.second);
  }
  if (at < t1_) gaps << qMakePair(at, t1_);
  const double idleSeconds = length(gaps);
  int best = -1;
  double bestSeconds = 0;
  for (int i = 0; i < kLanes.size(); ++i) {
    if (i == kCompute) continue;
    const double s = overlap(busy_[i], gaps);
    if (s > bestSeconds) best = i, bestSeconds = s;
  }
  if (best < 0 || bestSeconds < 0.5 * idleSeconds)
    return named("", tr("host (no lane busy): %1").arg(idle));
  const QString lane = kLanes[best];
  const QString what = lane == "h2d"         ? tr("waiting for H2D (weights)")
                       : lane == "reduce"    ? tr("waiting for the collectives between GPUs")
                       : lane == "d2h"       ? tr("waiting for D2H (gradients)")
                       : lane == "optimizer" ? tr("waiting for the optimizer")
                       : lane == "ssd_read"  ? tr("waiting for the SSD (reads)")
                                             : tr("waiting for the SSD (writes)");
  return named(lane, tr("%1: %2").arg(what, idle));
}

QString TimelineView::summary() const {
  if (spans_.isEmpty()) return {};
  const double frame = t1_ - t0_;
  const QString seconds = frame >= 1 ? tr("%1 s").arg(frame, 0, 'f', 2)
                                     : tr("%1 ms").arg(frame * 1e3, 0, 'f', frame >= 0.01 ? 0 : 1);
  QStringList parts;
  if (window_) {
    parts << tr("last %1").arg(seconds);
  } else if (stepEnd_ < 0) {
    parts << tr("latest blocks") << seconds;
  } else {
    parts << (step_ > 0 ? tr("step %1").arg(step_) : tr("one step")) << seconds;
  }
  parts << tr("compute %1 busy").arg(percent(laneBusyFraction("compute"), 1));
  QVector<bool> present(kLanes.size(), false);
  for (const Span& s : spans_)
    if (const int l = laneOf(s.phase); l >= 0) present[l] = true;
  // In the order a step moves its bytes: weights in, gradients out, the update, the SSD.
  for (const char* lane : {"h2d", "reduce", "d2h", "optimizer", "ssd_read", "ssd_write"}) {
    const int i = static_cast<int>(kLanes.indexOf(lane));
    if (present[i]) parts << kLaneNames[i] + " " + percent(laneBusyFraction(lane));
  }
  parts << limiter();
  return parts.join(QStringLiteral(" · "));
}

bool TimelineView::event(QEvent* e) {
  // Over a lane: what the lane shows, then the step's summary.
  if (e->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(e);
    const QString lane = laneAt(help->pos());
    if (!lane.isEmpty()) {
      const QString line = summary();
      QToolTip::showText(help->globalPos(),
                         laneToolTip(lane) + (line.isEmpty() ? QString() : "\n" + line), this);
      return true;
    }
  }
  return QWidget::event(e);
}

void TimelineView::paintEvent(QPaintEvent*) {
  QPainter p(this);
  p.fillRect(rect(), palette().base());
  const QFontMetrics fm(font());
  const int top = lanesTop();  // the summary line (and the chooser) above the lanes
  const int laneH = laneHeight();
  const QStringList shown = shownLanes();
  // The row of each of kLanes, -1 for a lane not drawn.
  QVector<int> rowOf(kLanes.size());
  for (int i = 0; i < kLanes.size(); ++i) rowOf[i] = static_cast<int>(shown.indexOf(kLanes[i]));
  const QColor text = palette().text().color();
  p.setPen(text);
  for (int i = 0; i < kLanes.size(); ++i)
    if (rowOf[i] >= 0) p.drawText(4, top + rowOf[i] * laneH + laneH / 2 + 4, kLaneNames[i]);
  if (spans_.isEmpty()) {
    p.drawText(rect().adjusted(kLeft, 0, 0, 0), Qt::AlignCenter, tr("no timeline spans yet"));
    return;
  }
  const int summaryX = chooser_->isHidden() ? 4 : chooser_->geometry().right() + 8;
  p.drawText(summaryX, (top - fm.height()) / 2 + fm.ascent(),
             fm.elidedText(summary(), Qt::ElideRight, width() - summaryX - 4));
  const double w = width() - kLeft - 8;
  auto xOf = [&](double t) { return kLeft + (std::clamp(t, t0_, t1_) - t0_) / (t1_ - t0_) * w; };
  // Compute's idle time, tinted, so that the gaps the verdict speaks of show.
  if (busy_.size() == kLanes.size()) {
    QColor idle("#d62728");
    idle.setAlpha(40);
    double at = t0_;
    auto tint = [&](double a, double b) {
      p.fillRect(QRectF(xOf(a), top + rowOf[kCompute] * laneH + 1, xOf(b) - xOf(a), laneH - 2),
                 idle);
    };
    for (const auto& iv : busy_[kCompute]) {
      if (iv.first > at) tint(at, iv.first);
      at = std::max(at, iv.second);
    }
    if (at < t1_) tint(at, t1_);
  }
  int layers = 1;
  for (const Span& s : spans_) layers = std::max(layers, s.layer + 1);
  for (const Span& s : spans_) {
    const int lane = laneOf(s.phase);
    if (lane < 0 || rowOf[lane] < 0) continue;
    const double x0 = xOf(s.start), x1 = xOf(s.end);
    QColor c = layerColor(s.layer, layers);
    if (s.phase == "backward") c = c.darker(130);
    p.fillRect(QRectF(x0, top + rowOf[lane] * laneH + 2, std::max(1.0, x1 - x0), laneH - 4), c);
  }
  // Time axis: ms from the start of the frame.
  const int axisY = top + static_cast<int>(shown.size()) * laneH + 2;
  QColor grid = text;
  grid.setAlpha(90);
  // The end of the step's forward and backward: what follows is its optimizer, beside the next
  // step's forward.
  if (stepEnd_ > t0_ && stepEnd_ < t1_ - 1e-6 * (t1_ - t0_)) {
    p.setPen(QPen(grid, 1, Qt::DashLine));
    const int x = static_cast<int>(xOf(stepEnd_));
    p.drawLine(x, top, x, axisY);
  }
  p.setPen(grid);
  p.drawLine(kLeft, axisY, kLeft + static_cast<int>(w), axisY);
  const QVector<double> t = ticks();
  const QStringList labels = tickLabels();
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

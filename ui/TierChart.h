// TierChart: one memory tier's bytes by category as a stacked area over time (on HBM the state
// tier — the master, gradients and moments of the blocks it holds — as one area, "state tier",
// beside weights, gradient buffers, checkpoints, the saved activations and workspace; the state
// tier and the saved activations in the legend only once a sample holds them: RunSeries), with the
// tier's
// capacity as a dashed line (QCustomPlot; one graph per category filled down to the one below),
// and, where the device reports its own use (HBM: the GPU's memory in use, NVML or cudaMemGetInfo),
// that as a solid line over the stack: the gap is what the CUDA context, the allocator and other
// processes hold beyond the engine's accounting. A run on several GPUs adds each GPU's own use as a
// line ("GPU 0", "GPU 1"): the stack and the solid line are their sums.
// update() sets the graphs' data from the series' ring buffers, at most kMaxDrawnPoints samples a
// category however long the run (every n-th and the newest: a spike between them is not drawn,
// the heading's figure and the axis still count it), and queues one replot. A tier the
// worker does not report is shown as unavailable, never as zero (STYLE.md 10). The y unit follows
// the data (kB to TB); when the tier's use is under 5% of its capacity the axis fits the data and
// the heading states the capacity instead of drawing a line at the top. On the CPU backend (the
// run's plan names it) the "hbm" tier is the backend's device arena in host memory, and the heading
// says so rather than calling it HBM. GUI thread only.
#pragma once

#include <qcustomplot.h>

#include <QMap>
#include <QString>
#include <optional>

#include "RunSeries.h"

namespace spillway::ui {

class TierChart : public QCustomPlot {
  Q_OBJECT
 public:
  TierChart(const QString& tier, const QString& title, QWidget* parent = nullptr);
  void update(const RunSeries& series);
  QString heading() const;     // e.g. "DRAM (host): 4.16 MB of 25.0 GB"
  bool measuredShown() const;  // the device's own figure is drawn
  // The per-GPU lines drawn (HBM of a run on several GPUs), by legend: "GPU 0", "GPU 1".
  QStringList gpuLines() const;
  // The newest sample's bytes of `category` ("state", "weights", ...) as drawn; absent where the
  // samples do not carry it.
  std::optional<double> newestBytes(const QString& category) const;
  // The category's area is drawn and in the legend.
  bool categoryShown(const QString& category) const;
  const QString& tier() const { return tier_; }

 private:
  QString tier_, title_;
  QCPTextElement* heading_;
  QCPGraph* capacity_;
  QCPGraph* measured_;           // hidden (and out of the legend) while the device reports nothing
  QVector<QCPGraph*> gpuLines_;  // each GPU's memory in use, made as GPUs come
  QCPItemText* unavailable_;     // shown while the worker reports nothing for this tier
  QVector<QCPGraph*> layers_;    // by categoryNames(tier_)
  QMap<QString, double> newest_;
};

// Colours of the categories, shared by the charts and their legends.
QColor categoryColor(const QString& category);
const QStringList& categoryNames();
// The categories a tier's chart stacks, bottom up: on "hbm" the state tier's three as one,
// "state", in place of master and optimizer (which the device holds only for it), and the saved
// activations, "activations".
const QStringList& categoryNames(const QString& tier);
// Whether a category is drawn (and in the legend) only once a sample holds some: "state" and
// "activations", which most runs have none of.
bool shownWhenHeld(const QString& category);

}  // namespace spillway::ui

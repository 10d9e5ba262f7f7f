// Chart helpers shared by the pages: a plot with a bold title row and a compact legend below it,
// the title alone (for custom plot classes), the loss smoothing, and a series' points as drawn
// (bounded for a long run). GUI thread only.
#pragma once

#include <QString>
#include <QVector>

class QCustomPlot;
class QCPAxis;
class QCPGraph;
class QCPTextElement;

namespace spillway::ui {

// Inserts a bold title row at the top of `plot` and returns it (to retitle later).
QCPTextElement* addPlotTitle(QCustomPlot* plot, const QString& title);
// Moves a plot's legend out of the axis rect into a compact row below it, `columns` entries wide,
// and makes the plot follow the palette (PlotTheme).
void placeLegendBelow(QCustomPlot* plot, int columns);
// A new plot with a title, axis labels and the legend below, at least `minHeight` pixels tall.
QCustomPlot* titledPlot(const QString& title, const QString& xLabel, const QString& yLabel,
                        int legendColumns, int minHeight);
// Exponential moving average with bias correction (TensorBoard's smoothing); weight in [0, 1).
QVector<double> smoothEma(const QVector<double>& y, double weight);
// The same into `out` (resized; its storage is reused from one call to the next).
void smoothEma(const QVector<double>& y, double weight, QVector<double>& out);

// The most points one series draws: about one a pixel of a chart a third of a 1920-pixel screen
// wide (each chart of the Live page's rows is). More cost the paint without showing more.
constexpr int kMaxDrawnPoints = 640;
// Replaces `graph`'s data with x, y (x ascending) times `scale`. A series longer than `maxPoints`
// is drawn as the lowest and highest point of each run of consecutive points (a run per two points
// allowed), in their order, so that spikes and the curve's extremes stay; its newest point and its
// line breaks (NaN values) are always kept. `y` may be shorter than `x`: its values belong to x's
// last ones (the ones before are 0).
void setDecimatedData(QCPGraph* graph, const QVector<double>& x, const QVector<double>& y,
                      double scale = 1, int maxPoints = kMaxDrawnPoints);

// Fits `axis` to the values of its visible graphs, as QCPAxis::rescale does, except where they
// are all one value (a constant learning rate): QCustomPlot then keeps the axis's old span around
// it (3e-3 on an axis from -2 to 2); here the axis spans half the value each side of it, or -1 to
// 1 around 0. An axis without values is left as it is.
void fitValueAxis(QCPAxis* axis);

// Every axis of `plot` back to 0..1: a new run's empty charts do not keep the last run's ranges.
void resetAxes(QCustomPlot* plot);

}  // namespace spillway::ui

// Chart helpers shared by the pages: a plot with a bold title row and a compact legend below it,
// the title alone (for custom plot classes), and the loss smoothing. GUI thread only.
#pragma once

#include <QString>
#include <QVector>

class QCustomPlot;
class QCPTextElement;

namespace spillway::ui {

// Inserts a bold title row at the top of `plot` and returns it (to retitle later).
QCPTextElement* addPlotTitle(QCustomPlot* plot, const QString& title);
// Moves a plot's legend out of the axis rect into a compact row below it, `columns` entries wide,
// and makes the plot follow the palette (PlotTheme).
void placeLegendBelow(QCustomPlot* plot, int columns);
// A new plot with a title, axis labels and the legend below, at least `minHeight` pixels tall.
QCustomPlot* titledPlot(const QString& title, const QString& xLabel, const QString& yLabel, int legendColumns,
                        int minHeight);
// Exponential moving average with bias correction (TensorBoard's smoothing); weight in [0, 1).
QVector<double> smoothEma(const QVector<double>& y, double weight);

}  // namespace spillway::ui

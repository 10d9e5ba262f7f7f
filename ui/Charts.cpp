#include "Charts.h"

#include <qcustomplot.h>

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

QCustomPlot* titledPlot(const QString& title, const QString& xLabel, const QString& yLabel, int legendColumns,
                        int minHeight) {
  auto* p = new QCustomPlot;
  addPlotTitle(p, title);
  p->xAxis->setLabel(xLabel);
  p->yAxis->setLabel(yLabel);
  placeLegendBelow(p, legendColumns);
  p->setMinimumHeight(minHeight);
  return p;
}

QVector<double> smoothEma(const QVector<double>& y, double weight) {
  QVector<double> out(y.size());
  double last = 0, debias = 0;
  for (int i = 0; i < y.size(); ++i) {
    last = last * weight + (1 - weight) * y[i];
    debias = debias * weight + (1 - weight);
    out[i] = last / debias;
  }
  return out;
}

}  // namespace spillway::ui

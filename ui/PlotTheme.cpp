#include "PlotTheme.h"

#include <qcustomplot.h>

#include <QCoreApplication>
#include <QEvent>

namespace spillway::ui {

PlotTheme* PlotTheme::instance() {
  static PlotTheme* theme = new PlotTheme(QCoreApplication::instance());
  return theme;
}

void PlotTheme::follow(QCustomPlot* plot) {
  apply(plot);
  plot->installEventFilter(instance());
}

bool PlotTheme::isDark(const QCustomPlot* plot) {
  const QPalette& p = plot->palette();
  return p.color(QPalette::Window).lightness() < p.color(QPalette::WindowText).lightness();
}

void PlotTheme::apply(QCustomPlot* plot) {
  const QPalette& pal = plot->palette();
  const QColor text = pal.color(QPalette::WindowText);
  QColor grid = text;
  grid.setAlpha(isDark(plot) ? 45 : 35);
  plot->setBackground(pal.brush(QPalette::Base));
  for (QCPAxisRect* rect : plot->axisRects()) {
    for (QCPAxis* axis : rect->axes()) {
      axis->setBasePen(QPen(text));
      axis->setTickPen(QPen(text));
      axis->setSubTickPen(QPen(text));
      axis->setTickLabelColor(text);
      axis->setLabelColor(text);
      axis->grid()->setPen(QPen(grid, 0, Qt::DotLine));
      axis->grid()->setZeroLinePen(Qt::NoPen);
    }
  }
  plot->legend->setTextColor(text);
  plot->legend->setBrush(Qt::NoBrush);
  for (int i = 0; i < plot->plotLayout()->elementCount(); ++i) {
    if (auto* title = qobject_cast<QCPTextElement*>(plot->plotLayout()->elementAt(i)))
      title->setTextColor(text);
  }
}

bool PlotTheme::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::PaletteChange || event->type() == QEvent::ApplicationPaletteChange) {
    if (auto* plot = qobject_cast<QCustomPlot*>(watched)) {
      apply(plot);
      plot->replot(QCustomPlot::rpQueuedReplot);
    }
  }
  return QObject::eventFilter(watched, event);
}

}  // namespace spillway::ui

// PlotTheme: makes QCustomPlot charts follow the application's palette, so a dark desktop theme
// gets dark charts (QCustomPlot draws white by default). follow() styles a plot once and keeps it
// in step when the palette changes (QEvent::PaletteChange). GUI thread only; one shared instance,
// owned by the QApplication, filters the events of every plot it follows.
#pragma once

#include <QObject>

class QCustomPlot;

namespace spillway::ui {

class PlotTheme : public QObject {
  Q_OBJECT
 public:
  // Styles `plot` from its palette now and on every later palette change.
  static void follow(QCustomPlot* plot);
  // Background, axes, ticks, grid, legend and title text from `plot`'s palette (no replot).
  static void apply(QCustomPlot* plot);
  // True when the palette's window colour is darker than its text (a dark theme).
  static bool isDark(const QCustomPlot* plot);

 protected:
  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  using QObject::QObject;
  static PlotTheme* instance();
};

}  // namespace spillway::ui

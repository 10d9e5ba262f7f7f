// ComparePage: two or more runs side by side — loss, tokens/s and tier usage overlaid against
// step, tokens or wall time with a smoothing slider; the config diff with a "differences only"
// toggle; export of the charts as PNG or SVG and of the metrics as CSV. Reads the run store on
// setRuns() and when a control changes, never on a timer. GUI thread; borrows the model.
#pragma once

#include <QStringList>
#include <QWidget>

class QCheckBox;
class QComboBox;
class QSlider;
class QTableWidget;
class QCustomPlot;

namespace spillway::ui {

class RunHistoryModel;

class ComparePage : public QWidget {
  Q_OBJECT
 public:
  explicit ComparePage(RunHistoryModel* model, QWidget* parent = nullptr);
  void setRuns(const QStringList& runIds);
  const QStringList& runs() const { return runIds_; }
  QTableWidget* diffTable() const { return diff_; }
  QCustomPlot* lossPlot() const { return loss_; }
  QCustomPlot* memoryPlot() const { return memory_; }
  enum XAxis { kStep, kTokens, kWallTime };
  void setXAxis(XAxis x);
  // Metrics of the runs, one row per step; a value the worker did not record is an empty field.
  bool exportCsv(const QString& path) const;
  // The loss, tokens/s and tier charts side by side; .png or .svg by the extension.
  bool exportChart(const QString& path) const;

 private:
  void redraw();
  RunHistoryModel* model_;
  QStringList runIds_;
  QComboBox* xAxis_;
  QSlider* smoothing_;
  QCheckBox* diffOnly_;
  QCustomPlot *loss_, *speed_, *memory_;
  QTableWidget* diff_;
};

}  // namespace spillway::ui

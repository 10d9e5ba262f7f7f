// ComparePage: two or more runs side by side — loss (and each run's eval loss), tokens/s and tier
// usage overlaid against step, tokens or wall time with a smoothing slider; the config diff with
// a "differences only" toggle; export of the charts as PNG or SVG and of the metrics as CSV (run
// id and name, eval loss on its steps), each saying where it went. Reads the run store on
// setRuns() and when a control changes, never on a timer. GUI thread; borrows the model.
#pragma once

#include <QStringList>
#include <QWidget>

class QCheckBox;
class QLabel;
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
  // Metrics of the runs, one row per step (and per eval step without one), with the run's id and
  // name and the eval loss; a value the worker did not record is an empty field. `rows`: the
  // rows written, header aside.
  bool exportCsv(const QString& path, int* rows = nullptr) const;
  // The loss, tokens/s and tier charts side by side; .png or .svg by the extension.
  bool exportChart(const QString& path) const;
  // What the last export from the buttons said ("Saved 8 rows of 2 runs to /x/metrics.csv · open
  // folder"), "" before one.
  QString exportMessage() const;

 private:
  void redraw();
  void showExport(bool ok, const QString& text, const QString& path);
  RunHistoryModel* model_;
  QStringList runIds_;
  QComboBox* xAxis_;
  QSlider* smoothing_;
  QCheckBox* diffOnly_;
  QCustomPlot *loss_, *speed_, *memory_;
  QTableWidget* diff_;
  QLabel* exportStatus_;
};

}  // namespace spillway::ui

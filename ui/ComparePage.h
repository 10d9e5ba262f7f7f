// ComparePage: two or more runs side by side, picked in its own list of the run store's runs (or
// sent from History's selection) — with an empty state that says what to do until they are: loss
// (and each run's eval loss), tokens/s and tier usage overlaid against step, tokens or wall time
// with a smoothing slider; the config diff with a "differences only" toggle (and, beside
// placement.hbm_state_blocks, the row "HBM state (plan)": how many blocks' state each run's plan
// kept in HBM); export of the charts
// as PNG or SVG and of the metrics as CSV (run id and name, eval loss on its steps), each saying
// where it went. setRuns() reads the runs' metrics, evals and samples once, on a pool thread
// through a connection of its own (a long run's samples take a while), and caches them: the
// smoothing slider and the x-axis choice re-derive the curves from the cache, and the CSV is
// written from it. GUI thread; borrows the model.
#pragma once

#include <QHash>
#include <QStringList>
#include <QWidget>
#include <optional>
#include <vector>

#include "PlanResult.h"
#include "history/run-store.h"

class QCheckBox;
class QLabel;
class QListWidget;
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
  // Shows `runIds`: their data is read on a pool thread, and the charts and the diff are drawn
  // when it is in (loaded()); until then they show the runs' data already cached, if any.
  void setRuns(const QStringList& runIds);
  // Whether a read started by setRuns() is still going.
  bool loading() const { return loading_; }
  // How many runs' data were read from the store since the page was made (tests: moving the
  // slider reads nothing).
  int runsLoaded() const { return runsLoaded_; }
  const QStringList& runs() const { return runIds_; }
  // The run picker: one checkable row per run of the model (newest first); checking and
  // unchecking calls setRuns().
  QListWidget* runPicker() const { return picker_; }
  // What the page says while fewer than two runs are picked (hidden from two on).
  QLabel* emptyState() const { return empty_; }
  QTableWidget* diffTable() const { return diff_; }
  // The diff's row of each run's planned HBM state ("18 of 34 blocks"; "—" without a plan).
  static constexpr const char* kPlannedStateKey = "HBM state (plan)";
  // The diff's row of the GPUs each run trained on, from its plan ("1", "2 (0, 1)"; "—" without).
  static constexpr const char* kPlannedDevicesKey = "GPUs (plan)";
  // Each run's saved activations as its plan chose them, beside placement.saved_activation_layers.
  static constexpr const char* kPlannedSavedKey = "Saved activations (plan)";
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

 signals:
  // The runs of the last setRuns() are read and drawn.
  void loaded();

 private:
  // One run as read from the store: what the charts, the diff and the CSV are made of.
  struct RunData {
    RunInfo info;
    std::vector<MetricRow> metrics;
    std::vector<EvalRow> evals;
    // Each sample's used bytes of HBM, DRAM and SSD (nullopt: the sample did not say).
    struct TierSample {
      double t_s = 0;
      std::optional<double> used[3];
    };
    std::vector<TierSample> samples;
    StatePlacement state;  // its plan's HBM state tier (blocks 0: no plan found)
    DeviceUse devices;     // its plan's GPUs (count 0: no plan found)
  };
  // Reads runs `ids` from the store at `path` (a connection of its own); any thread. A run the
  // store does not have is left out.
  static QHash<QString, RunData> load(const std::string& path, const QStringList& ids);
  void redraw();
  // The picker's rows from the model's runs, checked where setRuns() has them.
  void fillPicker();
  // The empty state's text and the charts' visibility for the runs picked.
  void showState();
  void showExport(bool ok, const QString& text, const QString& path);
  RunHistoryModel* model_;
  QStringList runIds_;
  QHash<QString, RunData> runs_;  // id -> the run's data, for runIds_
  bool loading_ = false;
  quint64 generation_ = 0;  // setRuns() bumps it: a read for the runs before is dropped
  int runsLoaded_ = 0;
  QComboBox* xAxis_;
  QSlider* smoothing_;
  QCheckBox* diffOnly_;
  QCustomPlot *loss_, *speed_, *memory_;
  QTableWidget* diff_;
  QLabel* exportStatus_;
  QListWidget* picker_;
  QLabel* empty_;
  QWidget* charts_;  // everything but the picker and the empty state
};

}  // namespace spillway::ui

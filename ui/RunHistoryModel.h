// RunHistoryModel: the History page's table of runs from the SQLite run store (engine/history) —
// name, model, dataset, status, start, duration, tokens, final loss, the last eval loss, peak
// HBM/DRAM/SSD, mean
// tokens/s and the step time the plan predicted against the one the run measured. refresh() re-reads the store (the worker writes it; the GUI only reads, plus the
// user's edits: rename, tags, notes, delete). The figures read from the metrics and samples of a
// run that is not running are cached (keyed by its status, end and final step), so that showing
// History again does not re-read a long run's samples. Lives in the GUI thread.
#pragma once

#include <QAbstractTableModel>
#include <QHash>
#include <QString>
#include <QVector>
#include <memory>

#include "history/run-store.h"

namespace spillway::ui {

struct RunRow {
  RunInfo info;
  double durationSeconds = -1;
  double meanTokensPerSecond = -1;
  double tokens = 0;  // the final count, or the latest step's while the run is going
  double peakHbm = -1, peakDram = -1, peakSsd = -1;  // bytes, -1 = no samples
  std::optional<double> evalLoss;  // the last evaluation's loss; none before the first eval
  std::int64_t evalStep = -1;      // its step
};

class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    kName,
    kModel,
    kDataset,
    kStatus,
    kStart,
    kDuration,
    kTokens,
    kFinalLoss,
    kEvalLoss,
    kPeakHbm,
    kPeakDram,
    kPeakSsd,
    kTokensPerSecond,
    kStepTime,
    kTags,
    kNotes,
    kColumnCount
  };

  explicit RunHistoryModel(QObject* parent = nullptr);
  // Opens the store at `dbPath` (default: the worker's default). Returns an error message or "".
  QString open(const QString& dbPath = QString());
  RunStore* store() const { return store_.get(); }
  void refresh();

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  const RunRow& run(int row) const { return rows_[row]; }
  int rowOfRun(const QString& id) const;

 private:
  std::unique_ptr<RunStore> store_;
  QVector<RunRow> rows_;
  QHash<QString, RunRow> figures_;  // "id/status/ended/final step" -> figures of a finished run
};

}  // namespace spillway::ui

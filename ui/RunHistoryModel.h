// RunHistoryModel: the History page's table of runs from the SQLite run store (engine/history):
// name, run id (which tells apart runs of the same name), model, dataset, status, why a failed or
// interrupted run ended (the error it recorded), start, duration, tokens, final loss, the last eval
// loss, peak HBM/DRAM/SSD, mean tokens/s, the step time the plan predicted against the one the
// run measured, how many blocks' state its plan kept in HBM, and the GPUs it trained on (its
// plan's "devices": "1", "2 (0, 1)"). refresh() re-reads the store (the
// worker writes it; the GUI only reads, plus the user's edits: rename, tags, notes, delete, which
// go through edits(), a RunEditQueue that writes them on a pool thread and refreshes the rows after
// each) on a pool thread, through a connection of its own: marking the runs of dead workers is a
// write that waits for a worker's write lock, and a long run's metrics and samples take a while to
// read, so neither may hold up the window. The rows change in one model reset when the read is
// done, then refreshed() is emitted. The figures read from the metrics and samples of a run that is
// not running are cached (keyed by its status, end and final step), so that showing History again
// does not re-read a long run's samples. Lives in the GUI thread.
#pragma once

#include <QAbstractTableModel>
#include <QHash>
#include <QString>
#include <QVector>
#include <memory>

#include "PlanResult.h"
#include "history/run-store.h"

namespace spillway::ui {

class RunEditQueue;

struct RunRow {
  RunInfo info;
  double durationSeconds = -1;
  double meanTokensPerSecond = -1;
  double tokens = 0;  // the final count, or the latest step's while the run is going
  double peakHbm = -1, peakDram = -1, peakSsd = -1;  // bytes, -1 = no samples
  std::optional<double> evalLoss;  // the last evaluation's loss; none before the first eval
  std::int64_t evalStep = -1;      // its step
  // Why a failed or interrupted run ended: the error its worker recorded in the run's row, else
  // the message of its last `error` event; "" for other runs.
  QString failure;
  // Where the run's plan put the blocks' master, gradients and moments (blocks 0: no plan found).
  StatePlacement state;
  // The GPUs its plan spread the steps over (count 0: no plan found).
  DeviceUse devices;
};

class RunHistoryModel : public QAbstractTableModel {
  Q_OBJECT
 public:
  enum Column {
    kName,
    kRunId,
    kModel,
    kDataset,
    kStatus,
    kFailure,
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
    kHbmState,
    kDevices,
    kTags,
    kNotes,
    kColumnCount
  };

  explicit RunHistoryModel(QObject* parent = nullptr);
  // Opens the store at `dbPath` (default: the worker's default) and starts reading its runs
  // (refresh()). Returns an error message or "".
  QString open(const QString& dbPath = QString());
  // The window's thread's connection, for reads (Compare's run list). Writes go through edits().
  RunStore* store() const { return store_.get(); }
  // The user's edits of the store (tags, notes, rename, delete), written off the window's thread;
  // the rows are re-read after each.
  RunEditQueue* edits() const { return edits_; }
  // The store's file ("" before open()), for a pool thread's own connection.
  const std::string& databasePath() const { return path_; }
  // The options of every GUI connection: no reconcile on open (a write that can wait for a
  // worker's lock; a read does it), and a write gives up after 1 s of another process's write
  // lock where a worker's own writes wait 5 s.
  static RunStoreOptions connectionOptions();
  // Whether `run` trained on the CPU backend (its software_json's "backend"): its "hbm" tier is
  // then the CPU's arena in DRAM, named so (deviceTierName), not HBM.
  static bool ranOnCpu(const RunInfo& run);
  // The plan `run` trained with: runs.db's plan event where the store has one (the latest),
  // else the first "plan" event of the run folder's events.jsonl (read up to kPlanScanBytes: the
  // worker writes it as training starts, before the steps' lines). nullopt when neither has one.
  // Reads the disk: a pool thread's call.
  static std::optional<Plan> runPlan(RunStore& store, const RunInfo& run);
  static constexpr qint64 kPlanScanBytes = 16 << 20;
  // Starts re-reading the store on a pool thread; a refresh asked while one runs follows it.
  void refresh();
  // Whether a refresh is still reading.
  bool loading() const { return loading_; }

  int rowCount(const QModelIndex& parent = {}) const override;
  int columnCount(const QModelIndex& parent = {}) const override;
  QVariant data(const QModelIndex& index, int role) const override;
  QVariant headerData(int section, Qt::Orientation orientation, int role) const override;
  const RunRow& run(int row) const { return rows_[row]; }
  int rowOfRun(const QString& id) const;

 signals:
  // A refresh's rows are in the model.
  void refreshed();

 private:
  using FigureCache =
      QHash<QString, RunRow>;  // "id/status/ended/final step" -> figures of a finished run
  struct Loaded {
    bool ok = false;  // false: the store could not be read, the rows shown stay
    QVector<RunRow> rows;
    FigureCache figures;  // the cache with the finished runs this read added
  };
  // Reads every run and its figures from `store`, on any thread.
  static Loaded load(RunStore& store, FigureCache figures);

  std::unique_ptr<RunStore> store_;  // the GUI thread's connection (reattach, Compare)
  RunEditQueue* edits_;
  std::string path_;  // the store's file, which each read opens on its own
  QVector<RunRow> rows_;
  FigureCache figures_;
  bool loading_ = false, again_ = false;
  quint64 generation_ = 0;  // open() bumps it: a read of the store before is dropped
};

}  // namespace spillway::ui

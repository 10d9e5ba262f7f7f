// HistoryPage: every run from the run store in a sortable, filterable table (its id beside its
// name, and why a failed run failed), with rename (F2), tags and notes, delete, open the run
// folder, resume from the latest checkpoint, clone as a new run, and open a run in Live or
// Compare; the same actions are on the rows' context menu. Below the table, the current run's
// loss curve (train loss and eval loss against step), read on a pool thread.
// Delete acts on every selected run after one confirmation that lists them (name, id, the size of
// their files); for one run it says what goes: the row, and the run's files (job.json,
// events.jsonl, checkpoints/, export/, the worker's output) with their size — unless another row
// names the same folder (or one inside or around it) or a live worker writes there, and then the
// folder stays and the confirmation says whose it is. Files in the folder that are not the run's
// stay too.
// Names, tags, notes and deletions are written off the window's thread (RunHistoryModel::edits());
// a line under the table says what is being saved, that it waits for a worker's write lock (the
// edit is kept and tried again), that it was saved, or why the store refused it. A run whose
// deletion is queued is not deleted twice: Delete is off on its row until the row goes.
#pragma once

#include <QSet>
#include <QWidget>

class QAction;
class QCustomPlot;
class QLabel;
class QVBoxLayout;
class QLineEdit;
class QPushButton;
class QSortFilterProxyModel;
class QTableView;

namespace spillway::ui {

class RunHistoryModel;
struct RunRow;

class HistoryPage : public QWidget {
  Q_OBJECT
 public:
  explicit HistoryPage(RunHistoryModel* model, QWidget* parent = nullptr);
  QStringList selectedRunIds() const;
  QTableView* table() const { return table_; }
  void setFilter(const QString& text);
  // The current run's loss curve: graph 0 its train loss, graph 1 its eval loss, against step.
  QCustomPlot* lossPlot() const { return curve_; }
  // Whether the current run's curve is still being read (curveShown() follows).
  bool curveLoading() const { return curveLoading_; }
  // Rename… (F2) and Delete (the Delete key), also on the rows' context menu.
  QAction* renameAction() const { return renameAction_; }
  QAction* deleteAction() const { return deleteAction_; }
  // What deleting a run would remove, worked out before anything is touched.
  struct DeletePlan {
    QString error;  // why the run cannot be deleted now ("" when it can)
    QString runName, runDir;
    QStringList files;     // the folder's entries that hold files Spillway wrote, which go
    QStringList kept;      // entries Spillway did not write, anywhere in the folder: they stay
    QStringList sharedBy;  // why the folder stays: "\"name\" (status)" of each run that uses it
    bool folderExists = false;
    qint64 bytes = 0;  // the size of `files`
    int checkpoints = 0;
  };
  static DeletePlan planDelete(RunHistoryModel* model, const QString& runId);
  // The confirmation's text for `plan`: what goes, what stays and why.
  static QString describe(const DeletePlan& plan);
  // Queues the deletion of a run's rows and, where planDelete says so, its files (no
  // confirmation: the button asks first) on the model's edits(), which write it on a pool thread
  // (waiting for a worker's write lock if need be) and then refresh the model; their written()
  // carries its outcome. Returns why the run cannot be deleted now, or "" once it is queued (or
  // when its deletion is queued already: it is not queued twice).
  static QString deleteRun(RunHistoryModel* model, const QString& runId);

 signals:
  void openLive(const QString& runDir);
  void cloneRun(const QString& jobJson);
  void compareRuns(const QStringList& runIds);
  void tryRun(const QString& runId);  // Try it: the run's model against its base
  void resumed(const QString& runDir, qint64 pid);
  // The current run's loss curve is drawn (or cleared, when no run is current).
  void curveShown();

 private:
  // The page's parts, top to bottom, each built with its own connects: the filter line, the table
  // (with the proxy that sorts and filters it), the edits' status line, and the action buttons.
  QLineEdit* buildFilter();
  QTableView* buildTable();
  QLabel* buildEditStatus();
  QCustomPlot* buildCurve();
  // Two rows of buttons (a window 960 wide has room for them), and the same actions on the rows'
  // context menu with their shortcuts.
  QVBoxLayout* buildButtons();
  void buildContextMenu();
  // The table's current run, nullptr when none.
  const RunRow* currentRun() const;
  // The buttons' actions on the current run (Compare, Try it and Clone only emit a signal).
  void openCurrentInLive();
  void editTags();
  void editNotes();
  // Asks for the current run's new name and writes it (edits()); an empty name is refused.
  void renameCurrent();
  void openFolder();
  void resumeCurrent();
  // Every selected run (else the current one): asks once, listing them (deleteRunConfirmation),
  // then deleteRun() for each.
  void deleteSelected();
  // Reads the current run's metrics and evals on a pool thread and draws them; nothing when the
  // curve shown is of the same run at the same step.
  void showCurve();
  // A refresh resets the model (after Tags or Notes, Refresh, a run's end): the same runs are
  // selected and current again afterwards, so that Notes after Tags acts on the run.
  void rememberSelection();
  void restoreSelection();
  // The edits' status line under the table: saving, waiting for the write lock, saved, refused.
  void showEdits();
  // Delete is off on a run whose deletion is queued or written (its row not gone yet).
  void updateDeleteButton();
  QSet<QString> deleting_;  // ids of the runs whose deletion is queued or written
  QPushButton* deleteButton_;
  QAction *renameAction_, *deleteAction_;
  QCustomPlot* curve_;
  QString curveKey_;  // "id/status/final step" of the curve drawn or being read
  quint64 curveGeneration_ = 0;
  bool curveLoading_ = false;
  QStringList keepSelected_;
  QString keepCurrent_;
  RunHistoryModel* model_;
  QSortFilterProxyModel* proxy_;
  QTableView* table_;
  QLineEdit* filter_;
  QLabel* editStatus_;
};

}  // namespace spillway::ui

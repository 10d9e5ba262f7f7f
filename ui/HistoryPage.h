// HistoryPage: every run from the run store in a sortable, filterable table, with tags and notes,
// delete (confirmed; removes the run's files too), open the run folder, resume from the latest
// checkpoint, clone as a new run, and open a run in Live or Compare.
#pragma once

#include <QWidget>

class QLineEdit;
class QSortFilterProxyModel;
class QTableView;

namespace spillway::ui {

class RunHistoryModel;

class HistoryPage : public QWidget {
  Q_OBJECT
 public:
  explicit HistoryPage(RunHistoryModel* model, QWidget* parent = nullptr);
  QStringList selectedRunIds() const;
  QTableView* table() const { return table_; }
  void setFilter(const QString& text);
  // Deletes a run's rows and folder (no confirmation: the button asks first).
  static QString deleteRun(RunHistoryModel* model, const QString& runId);

 signals:
  void openLive(const QString& runDir);
  void cloneRun(const QString& jobJson);
  void compareRuns(const QStringList& runIds);
  void resumed(const QString& runDir, qint64 pid);

 private:
  RunHistoryModel* model_;
  QSortFilterProxyModel* proxy_;
  QTableView* table_;
  QLineEdit* filter_;
};

}  // namespace spillway::ui

// PlanView: the plan of a job before launch — a bar per tier (HBM, DRAM, SSD: needed against
// free and total), the predicted step time, tokens/s, ETA and bottleneck, a red message when
// the job does not fit, saying what to change, and the planner's suggested micro-batch and
// accumulation with an Apply button (applySuggestion: the page sets its form), and after
// `plan --measure` a table of each figure planned, measured and their ratio, a ratio outside the
// planner's ±10% marked. GUI thread; owns its widgets.
#pragma once

#include <QWidget>

#include "PlanResult.h"

class QFormLayout;
class QLabel;
class QProgressBar;
class QPushButton;
class QTableWidget;

namespace spillway::ui {

class PlanView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanView(QWidget* parent = nullptr);
  void setPlan(const PlanResult& plan);
  // While the worker plans or measures: `message` with a busy bar; the last plan's tiers stay,
  // its measured table is hidden (it was of an earlier form).
  void setBusy(const QString& message);
  // A line in place of the summary, no busy bar and no error (a measure stopped by the user).
  void setNote(const QString& message);
  const PlanResult& plan() const { return plan_; }
  QString tierText(int i) const;   // for tests
  QString tierName(int i) const;   // the row's name: "HBM", "Arena (CPU, in DRAM)", "DRAM", "SSD"
  QString suggestionText() const;  // for tests
  QPushButton* applyButton() const { return apply_; }
  // The measured table (objectName "measuredTable"): columns figure, planned, measured, ratio; a
  // row per PlanResult::measured, an off-plan ratio's cell bold in red with why in its tooltip.
  QTableWidget* measuredTable() const { return table_; }
  QString errorText() const;  // the red line: the worker's message or why the job does not fit

 signals:
  // Apply was pressed: the suggestion's values, for the form.
  void applySuggestion(int microBatchSize, int gradAccum);

 private:
  PlanResult plan_;
  QProgressBar* bars_[3];
  QFormLayout* form_ = nullptr;  // the tiers' rows: their names follow the plan's backend
  QLabel* summary_;
  QLabel* suggestion_;
  QPushButton* apply_;
  QWidget* suggestionRow_;
  QLabel* message_;
  QProgressBar* busy_;
  QWidget* measuredBox_;  // the table and its caption
  QLabel* measuredCaption_;
  QTableWidget* table_;
  void showMeasured(const PlanResult& plan);
};

}  // namespace spillway::ui

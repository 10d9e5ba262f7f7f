// PlanView: the plan of a job before launch — a bar per tier (HBM, DRAM, SSD: needed against
// free and total), the predicted step time, tokens/s, ETA and bottleneck, a red message when
// the job does not fit, saying what to change, and the planner's suggested micro-batch and
// accumulation with an Apply button (applySuggestion: the page sets its form). GUI thread; owns
// its widgets.
#pragma once

#include <QWidget>

#include "PlanResult.h"

class QLabel;
class QProgressBar;
class QPushButton;

namespace spillway::ui {

class PlanView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanView(QWidget* parent = nullptr);
  void setPlan(const PlanResult& plan);
  void setBusy(const QString& message);  // while the worker plans
  const PlanResult& plan() const { return plan_; }
  QString tierText(int i) const;  // for tests
  QString suggestionText() const;  // for tests
  QPushButton* applyButton() const { return apply_; }

 signals:
  // Apply was pressed: the suggestion's values, for the form.
  void applySuggestion(int microBatchSize, int gradAccum);

 private:
  PlanResult plan_;
  QProgressBar* bars_[3];
  QLabel* summary_;
  QLabel* suggestion_;
  QPushButton* apply_;
  QWidget* suggestionRow_;
  QLabel* message_;
  QLabel* measured_;  // plan --measure's figures against the plan
};

}  // namespace spillway::ui

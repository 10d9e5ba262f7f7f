// PlanView: the plan of a job before launch — a bar per tier (HBM, DRAM, SSD: needed against
// free and total), the predicted step time, tokens/s, ETA and bottleneck, and a red message when
// the job does not fit, saying what to change. GUI thread; owns its widgets.
#pragma once

#include <QWidget>

#include "PlanResult.h"

class QLabel;
class QProgressBar;

namespace spillway::ui {

class PlanView : public QWidget {
  Q_OBJECT
 public:
  explicit PlanView(QWidget* parent = nullptr);
  void setPlan(const PlanResult& plan);
  void setBusy(const QString& message);  // while the worker plans
  const PlanResult& plan() const { return plan_; }
  QString tierText(int i) const;  // for tests

 private:
  PlanResult plan_;
  QProgressBar* bars_[3];
  QLabel* summary_;
  QLabel* message_;
};

}  // namespace spillway::ui

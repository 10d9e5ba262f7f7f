// PlanView: the plan of a job before launch — a bar per tier (HBM, DRAM, SSD: needed against
// free and total, split into what needs it: on HBM the state tier beside the weights, gradient
// buffers, checkpoints and workspace), the blocks by where their training state lives (a strip of
// embedding, layers and head coloured HBM, DRAM or SSD, with a legend and the planner's why), the
// predicted step time, tokens/s, ETA and bottleneck, a red message when
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

class BlockStrip;
class PartsBar;

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
  // The blocks by tier (objectName "blockStrip"), hidden while the plan names no blocks; its
  // legend ("HBM 18 blocks (4.30 GB) · DRAM 16 blocks") and caption (the planner's why).
  BlockStrip* blockStrip() const { return strip_; }
  QString stateLegend() const;
  QString stateCaption() const;
  // Tier i's bar, split into its parts.
  PartsBar* tierBar(int i) const { return bars_[i]; }
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
  PartsBar* bars_[3];
  BlockStrip* strip_;
  QWidget* stateRow_;  // the strip, its legend and caption
  QLabel* stateLegend_;
  QLabel* stateCaption_;
  QString legendText_;  // the legend without its colours
  void showState(const PlanResult& plan);
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

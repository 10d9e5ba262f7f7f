// PartsBar: a plan's tier bar (QProgressBar: its text, range and value as before) whose filled
// length is split into the parts of what the tier needs (TierPart: the HBM state tier, weights,
// gradient buffers, checkpoints, workspace, ...), each in its category's colour (TierChart.h,
// categoryColor), so that New run's HBM bar shows the state beside the rest. Without parts, or
// with `over` (the tier does not fit: a red bar), it draws as a plain QProgressBar. Its tooltip
// lists the parts.
//
// GUI thread; owns nothing but its value.
#pragma once

#include <QProgressBar>

#include "PlanResult.h"

namespace spillway::ui {

class PartsBar : public QProgressBar {
  Q_OBJECT
 public:
  explicit PartsBar(QWidget* parent = nullptr);
  // `parts` of a tier whose bar is `denominator` bytes long (its free bytes, else its total).
  void setParts(const QVector<TierPart>& parts, double denominator, bool over);
  const QVector<TierPart>& parts() const { return parts_; }
  // "state 4.30 GB · weights 1.20 GB · ...": the parts in words, "" without parts.
  QString partsText() const;
  // A part's name for people: "state" reads "HBM state (master, gradients, moments)".
  static QString partName(const QString& category);

 protected:
  void paintEvent(QPaintEvent* event) override;

 private:
  QVector<TierPart> parts_;
  double denominator_ = 0;
  bool over_ = false;
};

}  // namespace spillway::ui

// BlockStrip: the model's blocks (embedding, layers, head, in forward order) as a row of cells
// coloured by where each block's training state lives — HBM, DRAM or the SSD (PlanResult.h,
// StatePlacement) — New run's picture of the plan's "state". A block's tooltip names it and its
// tier; the strip's own tooltip is the planner's why. Colours are tierColor's, which the plan's
// legend uses too. Cells narrower than a pixel share it: a cell is drawn from its first to its
// last pixel, so 82 blocks fit 100 pixels and each tier's run of blocks keeps its share.
//
// GUI thread; owns nothing but its value.
#pragma once

#include <QWidget>

#include "PlanResult.h"

namespace spillway::ui {

class BlockStrip : public QWidget {
  Q_OBJECT
 public:
  explicit BlockStrip(QWidget* parent = nullptr);
  void setPlacement(const StatePlacement& placement);
  const StatePlacement& placement() const { return placement_; }
  // The cells drawn in `tier`'s colour (tests: what the strip draws, without its pixels).
  int cellsIn(StatePlacement::Tier tier) const;
  // The tier a cell is drawn as: the one StatePlacement::tierOf gives.
  StatePlacement::Tier cellTier(int block) const { return placement_.tierOf(block); }
  // The block under x (widget coordinates), -1 outside the cells.
  int blockAt(int x) const;
  static QColor tierColor(StatePlacement::Tier tier);
  static QString tierName(StatePlacement::Tier tier);

  QSize sizeHint() const override;
  QSize minimumSizeHint() const override;

 protected:
  void paintEvent(QPaintEvent* event) override;
  bool event(QEvent* event) override;

 private:
  // Cell b spans [left(b), left(b + 1)) of the strip's width.
  int left(int block) const;
  StatePlacement placement_;
};

}  // namespace spillway::ui

#include "BlockStrip.h"

#include <QHelpEvent>
#include <QPainter>
#include <QToolTip>

namespace spillway::ui {

using Tier = StatePlacement::Tier;

BlockStrip::BlockStrip(QWidget* parent) : QWidget(parent) {
  setObjectName("blockStrip");
  setSizePolicy(QSizePolicy::Expanding, QSizePolicy::Fixed);
}

QColor BlockStrip::tierColor(Tier tier) {
  switch (tier) {
    case Tier::kHbm:
      return QColor("#17becf");  // TierChart's "state": the HBM state tier
    case Tier::kDram:
      return QColor("#2ca02c");  // TierChart's "master": DRAM holds the master weights
    case Tier::kSsdMoments:
      return QColor("#9467bd");  // TierChart's "optimizer": the SSD holds the moments
    case Tier::kSsd:
      return QColor("#8c564b");  // the SSD holds the master too
  }
  return Qt::gray;
}

QString BlockStrip::tierName(Tier tier) {
  switch (tier) {
    case Tier::kHbm:
      return tr("HBM");
    case Tier::kDram:
      return tr("DRAM");
    case Tier::kSsdMoments:
      return tr("DRAM + SSD (moments)");
    case Tier::kSsd:
      return tr("SSD (master and moments)");
  }
  return {};
}

void BlockStrip::setPlacement(const StatePlacement& placement) {
  placement_ = placement;
  setToolTip(placement.hostWhy.isEmpty()
                 ? placement.why
                 : placement.why + QStringLiteral("\n") + placement.hostWhy);
  update();
}

int BlockStrip::cellsIn(Tier tier) const {
  int n = 0;
  for (int b = 0; b < placement_.blocks; ++b) n += cellTier(b) == tier;
  return n;
}

int BlockStrip::left(int block) const {
  const int n = std::max(placement_.blocks, 1);
  return static_cast<int>(static_cast<qint64>(width()) * block / n);
}

int BlockStrip::blockAt(int x) const {
  if (x < 0 || x >= width()) return -1;
  for (int b = 0; b < placement_.blocks; ++b)
    if (x < left(b + 1)) return b;
  return -1;
}

QSize BlockStrip::sizeHint() const {
  return {240, fontMetrics().height()};
}

QSize BlockStrip::minimumSizeHint() const {
  return {60, fontMetrics().height()};
}

void BlockStrip::paintEvent(QPaintEvent*) {
  QPainter p(this);
  const int h = height();
  // A hairline between cells where they are wide enough to tell apart; each tier's run of
  // blocks is one colour either way.
  const bool gaps = placement_.blocks > 0 && width() / placement_.blocks >= 4;
  for (int b = 0; b < placement_.blocks; ++b) {
    const int x0 = left(b), x1 = std::max(left(b + 1), x0 + 1);
    p.fillRect(QRect(x0, 0, x1 - x0 - (gaps ? 1 : 0), h), tierColor(cellTier(b)));
  }
}

bool BlockStrip::event(QEvent* event) {
  if (event->type() == QEvent::ToolTip) {
    auto* help = static_cast<QHelpEvent*>(event);
    const int b = blockAt(help->pos().x());
    if (b < 0) return QWidget::event(event);
    QString text = tr("%1: its master, gradients and moments in %2")
                       .arg(placement_.blockName(b), tierName(cellTier(b)));
    if (!placement_.why.isEmpty()) text += "\n" + placement_.why;
    QToolTip::showText(help->globalPos(), text, this);
    return true;
  }
  return QWidget::event(event);
}

}  // namespace spillway::ui

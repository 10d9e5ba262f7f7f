#include "PartsBar.h"

#include <QPainter>
#include <QStyleOptionProgressBar>
#include <QStylePainter>

#include "Format.h"
#include "TierChart.h"

namespace spillway::ui {

PartsBar::PartsBar(QWidget* parent) : QProgressBar(parent) {}

QString PartsBar::partName(const QString& category) {
  if (category == QLatin1String("state")) return tr("HBM state (master, gradients, moments)");
  if (category == QLatin1String("gradients")) return tr("gradients");
  if (category == QLatin1String("workspace")) return tr("workspace (activations)");
  if (category == QLatin1String("activations"))
    return tr("saved activations (the layers that skip the recompute)");
  return category;
}

void PartsBar::setParts(const QVector<TierPart>& parts, double denominator, bool over) {
  parts_ = parts;
  denominator_ = denominator;
  over_ = over;
  setToolTip(partsText());
  update();
}

QString PartsBar::partsText() const {
  QStringList words;
  for (const TierPart& p : parts_)
    words << tr("%1 %2").arg(partName(p.category), formatBytes(p.bytes));
  return words.join(QStringLiteral(" · "));
}

void PartsBar::paintEvent(QPaintEvent* event) {
  if (parts_.isEmpty() || over_ || denominator_ <= 0) {
    QProgressBar::paintEvent(event);
    return;
  }
  // The style's groove and label, the parts between them in place of its one chunk.
  QStylePainter p(this);
  QStyleOptionProgressBar option;
  initStyleOption(&option);
  p.drawControl(QStyle::CE_ProgressBarGroove, option);
  const QRect inner = style()->subElementRect(QStyle::SE_ProgressBarContents, &option, this);
  double x = inner.left();
  for (const TierPart& part : parts_) {
    const double w = inner.width() * part.bytes / denominator_;
    const double end = std::min<double>(x + w, inner.right() + 1);
    if (end <= x) break;
    QColor c = categoryColor(part.category);
    c.setAlpha(170);
    p.fillRect(QRectF(x, inner.top(), end - x, inner.height()), c);
    x = end;
  }
  // The text in the window's colour: over the parts, not a highlighted chunk's.
  option.progress = option.minimum;
  p.drawControl(QStyle::CE_ProgressBarLabel, option);
}

}  // namespace spillway::ui

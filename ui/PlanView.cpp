#include "PlanView.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QTableWidget>
#include <QVBoxLayout>

#include "BlockStrip.h"
#include "Format.h"
#include "PartsBar.h"

namespace spillway::ui {

PlanView::PlanView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* form = form_ = new QFormLayout;
  const char* names[] = {"HBM", "DRAM", "SSD"};
  for (int i = 0; i < 3; ++i) {
    bars_[i] = new PartsBar;
    bars_[i]->setRange(0, 1000);
    bars_[i]->setTextVisible(true);
    bars_[i]->setFormat(tr("not planned"));
    bars_[i]->setValue(0);
    form->addRow(names[i], bars_[i]);
  }
  layout->addLayout(form);
  // Where each block's master, gradients and moments live: the strip, then one line of legend and
  // the planner's why.
  stateRow_ = new QWidget;
  auto* sr = new QVBoxLayout(stateRow_);
  sr->setContentsMargins(0, 0, 0, 0);
  sr->setSpacing(2);
  strip_ = new BlockStrip;
  stateLegend_ = new QLabel;
  stateLegend_->setObjectName("stateLegend");
  stateLegend_->setTextFormat(Qt::RichText);
  stateLegend_->setWordWrap(true);
  stateCaption_ = new QLabel;
  stateCaption_->setObjectName("stateCaption");
  stateCaption_->setTextFormat(Qt::PlainText);
  stateCaption_->setWordWrap(true);
  QPalette muted = stateCaption_->palette();
  muted.setColor(QPalette::WindowText, muted.color(QPalette::PlaceholderText));
  stateCaption_->setPalette(muted);
  sr->addWidget(strip_);
  sr->addWidget(stateLegend_);
  sr->addWidget(stateCaption_);
  form->addRow(tr("Blocks"), stateRow_);
  if (auto* label = form->labelForField(stateRow_))
    label->setToolTip(
        tr("Where each block's fp32 master weights, gradients and AdamW moments live: embedding, "
           "layers and head, in forward order"));
  stateRow_->hide();
  form->labelForField(stateRow_)->hide();
  summary_ = new QLabel(tr("Press Plan to see what goes where and how fast it will run."));
  summary_->setObjectName("planSummary");
  summary_->setWordWrap(true);
  message_ = new QLabel;
  message_->setWordWrap(true);
  message_->setObjectName("planError");
  message_->setTextFormat(Qt::PlainText);
  busy_ = new QProgressBar;
  busy_->setObjectName("planBusy");
  busy_->setRange(0, 0);  // a plan or a measure has no steps to count from here
  busy_->setTextVisible(false);
  busy_->setMaximumSize(120, 12);
  busy_->hide();

  // plan --measure: planned, measured and measured ÷ planned, a row a figure.
  measuredBox_ = new QWidget;
  auto* mb = new QVBoxLayout(measuredBox_);
  mb->setContentsMargins(0, 0, 0, 0);
  measuredCaption_ = new QLabel;
  measuredCaption_->setObjectName("measuredCaption");
  measuredCaption_->setWordWrap(true);
  table_ = new QTableWidget(0, 3);
  table_->setObjectName("measuredTable");
  table_->setHorizontalHeaderLabels({tr("Planned"), tr("Measured"), tr("Measured ÷ planned")});
  table_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  table_->setSelectionMode(QAbstractItemView::NoSelection);
  table_->setFocusPolicy(Qt::NoFocus);
  table_->setVerticalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  table_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  table_->setSizeAdjustPolicy(QAbstractScrollArea::AdjustToContents);
  table_->horizontalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->verticalHeader()->setSectionResizeMode(QHeaderView::ResizeToContents);
  table_->setSizePolicy(QSizePolicy::Maximum, QSizePolicy::Fixed);
  auto* tableRow = new QHBoxLayout;
  tableRow->addWidget(table_);
  tableRow->addStretch();  // compact, on the left
  mb->addWidget(measuredCaption_);
  mb->addLayout(tableRow);
  measuredBox_->hide();
  message_->setStyleSheet("color: #d32f2f; font-weight: bold;");
  suggestionRow_ = new QWidget;
  auto* row = new QHBoxLayout(suggestionRow_);
  row->setContentsMargins(0, 0, 0, 0);
  suggestion_ = new QLabel;
  suggestion_->setWordWrap(true);
  suggestion_->setTextFormat(Qt::PlainText);
  suggestion_->setToolTip(tr(
      "The smallest tokens per step whose predicted tokens/s is within 5% of the best the planner "
      "finds for this model and machine (micro-batches 1-16, accumulation 1-64)"));
  apply_ = new QPushButton(tr("Apply"));
  apply_->setObjectName("applySuggestion");
  apply_->setToolTip(tr("Set the micro-batch size and gradient accumulation to the suggestion"));
  row->addWidget(suggestion_, 1);
  row->addWidget(apply_);
  suggestionRow_->hide();
  auto* summaryRow = new QHBoxLayout;
  summaryRow->addWidget(summary_, 1);
  summaryRow->addWidget(busy_);
  layout->addLayout(summaryRow);
  layout->addWidget(suggestionRow_);
  layout->addWidget(measuredBox_);
  layout->addWidget(message_);
  connect(apply_, &QPushButton::clicked, this, [this] {
    const BatchSuggestion& s = plan_.suggestion;
    if (!s.fits) return;
    emit applySuggestion(s.microBatchSize, s.gradAccum);
    apply_->setEnabled(false);
    apply_->setText(tr("Applied"));
    apply_->setToolTip(tr("Press Plan for the plan of these settings"));
  });
}

QString PlanView::suggestionText() const {
  return suggestion_->text();
}

void PlanView::setBusy(const QString& message) {
  summary_->setText(message);
  message_->clear();
  busy_->show();
  measuredBox_->hide();
}

void PlanView::setNote(const QString& message) {
  summary_->setText(message);
  message_->clear();
  busy_->hide();
  measuredBox_->hide();
}

QString PlanView::errorText() const {
  return message_->text();
}

QString PlanView::tierText(int i) const {
  return bars_[i]->format();
}

QString PlanView::tierName(int i) const {
  auto* label = qobject_cast<QLabel*>(form_->labelForField(bars_[i]));
  return label ? label->text() : QString();
}

void PlanView::setPlan(const PlanResult& plan) {
  plan_ = plan;
  for (int i = 0; i < 3; ++i) {
    if (i >= plan.tiers.size()) {
      bars_[i]->setFormat(tr("—"));
      bars_[i]->setValue(0);
      continue;
    }
    const TierBar& t = plan.tiers[i];
    const double denom = t.free > 0 ? t.free : t.total;
    bars_[i]->setValue(denom > 0 ? static_cast<int>(std::min(1.0, t.needed / denom) * 1000) : 0);
    bars_[i]->setFormat(t.text());
    if (auto* label = qobject_cast<QLabel*>(form_->labelForField(bars_[i]))) label->setText(t.name);
    const bool over = denom > 0 && t.needed > denom;
    bars_[i]->setStyleSheet(over ? "QProgressBar::chunk { background: #d32f2f; }" : "");
    bars_[i]->setParts(t.parts, denom, over);
  }
  showState(plan);
  summary_->setText(plan.ok ? plan.summary() : QString());
  const BatchSuggestion& s = plan.suggestion;
  suggestionRow_->setVisible(plan.ok && s.present);
  suggestion_->setText(plan.ok ? s.text() : QString());
  apply_->setText(tr("Apply"));
  apply_->setToolTip(tr("Set the micro-batch size and gradient accumulation to the suggestion"));
  apply_->setEnabled(s.fits && !s.sameAsJob);
  // A path in the worker's message may be longer than the window is wide: it wraps at its '/'.
  message_->setText(!plan.ok    ? breakablePaths(plan.error)
                    : plan.fits ? QString()
                                : tr("Does not fit: %1").arg(breakablePaths(plan.reason)));
  busy_->hide();
  showMeasured(plan);
}

QString PlanView::stateLegend() const {
  return legendText_;
}

QString PlanView::stateCaption() const {
  return stateCaption_->text();
}

void PlanView::showState(const PlanResult& plan) {
  const StatePlacement& s = plan.state;
  strip_->setPlacement(s);
  const bool shown = plan.ok && s.blocks > 0;
  stateRow_->setVisible(shown);
  form_->labelForField(stateRow_)->setVisible(shown);
  if (!shown) return;
  using Tier = StatePlacement::Tier;
  QStringList items, html;
  for (Tier t : {Tier::kHbm, Tier::kDram, Tier::kSsdMoments, Tier::kSsd}) {
    const int n = strip_->cellsIn(t);
    if (n == 0) continue;
    const QString name = BlockStrip::tierName(t);
    QString item = n == 1 ? tr("%1: 1 block").arg(name) : tr("%1: %2 blocks").arg(name).arg(n);
    if (t == Tier::kHbm && s.hbmBytes > 0) item += tr(" (%1)").arg(formatBytes(s.hbmBytes));
    items << QStringLiteral("■ ") + item;
    html << QStringLiteral("<span style=\"color:%1\">■</span> %2")
                .arg(BlockStrip::tierColor(t).name(), item.toHtmlEscaped());
  }
  legendText_ = items.join(QStringLiteral("  "));
  stateLegend_->setText(html.join(QStringLiteral(" &nbsp;")));
  // An old plan says nothing of the state: its blocks were all off the device.
  QString caption = !s.why.isEmpty() ? s.why
                    : s.onCpu        ? tr("The CPU backend keeps every block's state in DRAM.")
                                     : tr("This plan keeps every block's state off the GPU.");
  // Where the host keeps the blocks when some of them go to the SSD.
  if (!s.hostWhy.isEmpty() && s.count(StatePlacement::Tier::kDram) < s.blocks - s.hbmBlocks)
    caption += QStringLiteral("\n") + s.hostWhy;
  stateCaption_->setText(caption);
  stateCaption_->setVisible(!stateCaption_->text().isEmpty());
}

void PlanView::showMeasured(const PlanResult& plan) {
  table_->setRowCount(0);
  const bool shown = plan.ok && !plan.measured.isEmpty();
  measuredBox_->setVisible(shown);
  if (!shown) return;
  measuredCaption_->setText(
      plan.measuredSteps > 2 ? tr("Measured over the %1 steps after the first, against the plan "
                                  "(ratios more than 10% off it in red):")
                                   .arg(plan.measuredSteps - 1)
      : plan.measuredSteps == 2 ? tr("Measured over the step after the first, against the plan "
                                     "(ratios more than 10% off it in red):")
                                : tr("Measured over one step, the libraries' warm-up included, "
                                     "against the plan (ratios more than 10% off it in red):"));
  const QString absent =
      tr("Not available: this backend does not measure it, or the plan does "
         "not predict it");
  // What each figure counts, for its tooltip.
  auto note = [this](StepFigure figure) -> QString {
    switch (figure) {
      case StepFigure::kStepS:
        return tr(
            "Seconds per optimizer step: the median over the steps after the first (which "
            "also warms up the libraries)");
      case StepFigure::kTokensPerS:
        return tr("Trained tokens per second at that step time");
      case StepFigure::kPeakHbmBytes:
        return tr(
            "Measured: all device memory in use, the CUDA context and libraries included; "
            "the plan counts the engine's own");
      case StepFigure::kPeakDramBytes:
        return tr(
            "Measured: the worker's peak resident set, the data and libraries included; the "
            "plan counts the model state, gradients, moments and host checkpoints");
      case StepFigure::kH2dBytes:
        return tr(
            "Bytes copied host → device in a step; in brackets, the rate they ask of the "
            "link over the whole step");
      case StepFigure::kD2hBytes:
        return tr(
            "Bytes copied device → host in a step; in brackets, the rate they ask of the "
            "link over the whole step");
    }
    return {};
  };
  table_->setRowCount(plan.measured.size());
  QStringList names;
  for (int i = 0; i < plan.measured.size(); ++i) {
    const MeasuredFigure& f = plan.measured[i];
    names << f.name;
    const QString cells[] = {f.predictedText(), f.measuredText(), f.ratioText()};
    for (int c = 0; c < 3; ++c) {
      auto* item = new QTableWidgetItem(cells[c]);
      item->setTextAlignment(Qt::AlignRight | Qt::AlignVCenter);
      item->setToolTip(cells[c] == QStringLiteral("—") ? absent : note(f.figure));
      table_->setItem(i, c, item);
    }
    QTableWidgetItem* ratio = table_->item(i, 2);
    ratio->setData(Qt::UserRole, f.offPlan());
    if (f.offPlan()) {
      // Off the planner's ±10%: red and bold, and by how much in words.
      ratio->setText(QStringLiteral("⚠ ") + f.ratioText());
      ratio->setForeground(QColor("#d32f2f"));
      QFont bold = ratio->font();
      bold.setBold(true);
      ratio->setFont(bold);
      ratio->setToolTip(f.ratio > 1 ? tr("%1% more than planned (more than %2% off the plan)")
                                          .arg((f.ratio - 1) * 100, 0, 'f', 0)
                                          .arg(MeasuredFigure::kTolerance * 100, 0, 'f', 0)
                                    : tr("%1% less than planned (more than %2% off the plan)")
                                          .arg((1 - f.ratio) * 100, 0, 'f', 0)
                                          .arg(MeasuredFigure::kTolerance * 100, 0, 'f', 0));
    }
  }
  table_->setVerticalHeaderLabels(names);
  for (int i = 0; i < names.size(); ++i)
    table_->verticalHeaderItem(i)->setToolTip(note(plan.measured[i].figure));
  // Every row on screen: the table is as tall as its rows, never a scroll area of its own.
  table_->resizeColumnsToContents();
  table_->resizeRowsToContents();
  int height = table_->horizontalHeader()->sizeHint().height() + 2 * table_->frameWidth();
  for (int i = 0; i < table_->rowCount(); ++i) height += table_->rowHeight(i);
  table_->setFixedHeight(height);
}

}  // namespace spillway::ui

#include "PlanView.h"

#include <QFormLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QProgressBar>
#include <QPushButton>
#include <QVBoxLayout>

#include "Format.h"

namespace spillway::ui {

PlanView::PlanView(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* form = new QFormLayout;
  const char* names[] = {"HBM", "DRAM", "SSD"};
  for (int i = 0; i < 3; ++i) {
    bars_[i] = new QProgressBar;
    bars_[i]->setRange(0, 1000);
    bars_[i]->setTextVisible(true);
    bars_[i]->setFormat(tr("not planned"));
    bars_[i]->setValue(0);
    form->addRow(names[i], bars_[i]);
  }
  layout->addLayout(form);
  summary_ = new QLabel(tr("Press Plan to see what goes where and how fast it will run."));
  summary_->setWordWrap(true);
  message_ = new QLabel;
  message_->setWordWrap(true);
  measured_ = new QLabel;
  measured_->setObjectName("measured");
  measured_->setTextFormat(Qt::PlainText);
  measured_->setWordWrap(true);
  measured_->setVisible(false);
  message_->setStyleSheet("color: #d32f2f; font-weight: bold;");
  suggestionRow_ = new QWidget;
  auto* row = new QHBoxLayout(suggestionRow_);
  row->setContentsMargins(0, 0, 0, 0);
  suggestion_ = new QLabel;
  suggestion_->setWordWrap(true);
  suggestion_->setTextFormat(Qt::PlainText);
  suggestion_->setToolTip(
      tr("The smallest tokens per step whose predicted tokens/s is within 5% of the best the planner "
         "finds for this model and machine (micro-batches 1-16, accumulation 1-64)"));
  apply_ = new QPushButton(tr("Apply"));
  apply_->setObjectName("applySuggestion");
  apply_->setToolTip(tr("Set the micro-batch size and gradient accumulation to the suggestion"));
  row->addWidget(suggestion_, 1);
  row->addWidget(apply_);
  suggestionRow_->hide();
  layout->addWidget(summary_);
  layout->addWidget(suggestionRow_);
  layout->addWidget(measured_);
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
}

QString PlanView::tierText(int i) const {
  return bars_[i]->format();
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
    bars_[i]->setFormat(tr("needs %1 · free %2 · total %3")
                            .arg(formatBytes(t.needed),
                                 t.free > 0 ? formatBytes(t.free) : tr("unbounded"),
                                 t.total > 0 ? formatBytes(t.total) : tr("unbounded")));
    const bool over = denom > 0 && t.needed > denom;
    bars_[i]->setStyleSheet(over ? "QProgressBar::chunk { background: #d32f2f; }" : "");
  }
  summary_->setText(plan.ok ? plan.summary() : QString());
  const BatchSuggestion& s = plan.suggestion;
  suggestionRow_->setVisible(plan.ok && s.present);
  suggestion_->setText(plan.ok ? s.text() : QString());
  apply_->setText(tr("Apply"));
  apply_->setToolTip(tr("Set the micro-batch size and gradient accumulation to the suggestion"));
  apply_->setEnabled(s.fits && !s.sameAsJob);
  message_->setText(!plan.ok    ? plan.error
                    : plan.fits ? QString()
                                : tr("Does not fit: %1").arg(plan.reason));
  measured_->setVisible(plan.ok && !plan.measured.isEmpty());
  measured_->setText(tr("Measured against the plan (the steps after the first):") + "\n" + plan.measured.join('\n'));
}

}  // namespace spillway::ui

#include "SpinBox.h"

#include <QFormLayout>
#include <QLabel>
#include <QLineEdit>
#include <QToolTip>

#include "JobForm.h"

namespace spillway::ui {

SpinBoxRefusal::SpinBoxRefusal(QAbstractSpinBox* box, std::function<QString()> takes)
    : QObject(box), box_(box), takes_(std::move(takes)) {}

SpinBoxRefusal* SpinBoxRefusal::watch(QAbstractSpinBox* box, QLineEdit* edit,
                                      std::function<QString()> takes) {
  auto* r = new SpinBoxRefusal(box, std::move(takes));
  // textEdited, not textChanged: only what the user types is checked, not the box's own text.
  connect(edit, &QLineEdit::textEdited, r, &SpinBoxRefusal::edited);
  connect(box, &QAbstractSpinBox::editingFinished, r, &SpinBoxRefusal::finished);
  return r;
}

QString SpinBoxRefusal::of(const QAbstractSpinBox* box) {
  const auto* r = box->findChild<SpinBoxRefusal*>(QString(), Qt::FindDirectChildrenOnly);
  return r ? r->message() : QString();
}

QString SpinBoxRefusal::name() const {
  // QFormLayout::addRow makes its label the buddy of the field, or of the widget that holds it.
  for (const QLabel* l : box_->window()->findChildren<QLabel*>()) {
    if (l->buddy() && (l->buddy() == box_ || l->buddy()->isAncestorOf(box_)))
      return l->text().remove('&');
  }
  const QString key = box_->property(JobForm::kKeyProperty).toString();
  return key.isEmpty() ? tr("This field") : key;
}

void SpinBoxRefusal::edited(const QString& text) {
  QString t = text;
  int pos = t.size();
  if (box_->validate(t, pos) == QValidator::Acceptable) return clear();
  refusedText_ = text.trimmed();
  set(refusedText_.isEmpty()
          ? tr("%1 is empty: it takes %2.").arg(name(), takes_())
          : tr("%1 takes %2: \"%3\" is not one.").arg(name(), takes_(), refusedText_));
}

// Editing ended on refused text: QAbstractSpinBox has put the value back in the field. Said, so
// that the value the form keeps is never a surprise.
void SpinBoxRefusal::finished() {
  if (message_.isEmpty()) return;
  const QString said =
      refusedText_.isEmpty()
          ? tr("%1 cannot be empty: it stays %2.").arg(name(), box_->text())
          : tr("\"%1\" refused: %2 stays %3.").arg(refusedText_, name(), box_->text());
  clear();
  QToolTip::showText(box_->mapToGlobal(QPoint(0, box_->height())), said, box_);
}

void SpinBoxRefusal::clear() {
  refusedText_.clear();
  set(QString());
}

void SpinBoxRefusal::set(const QString& message) {
  if (message == message_) return;
  const bool wasRefused = !message_.isEmpty();
  message_ = message;
  if (message_.isEmpty()) {
    if (wasRefused) {
      box_->setPalette(QPalette());  // the window's colours again
      box_->setToolTip(fieldToolTip_);
    }
    QToolTip::hideText();
  } else {
    // The text's colour, not a frame: a style sheet would change the box's size.
    QPalette p = box_->palette();
    p.setColor(QPalette::Text, QColor("#d32f2f"));
    box_->setPalette(p);
    // The message goes when the pointer moves; the field's own tooltip keeps it meanwhile.
    if (!wasRefused) fieldToolTip_ = box_->toolTip();
    box_->setToolTip(fieldToolTip_.isEmpty() ? message_ : message_ + "\n\n" + fieldToolTip_);
    QToolTip::showText(box_->mapToGlobal(QPoint(0, box_->height())), message_, box_);
  }
  emit changed(message_);
}

SpinBox::SpinBox(QWidget* parent) : QSpinBox(parent) {
  auto* refusal = SpinBoxRefusal::watch(this, lineEdit(), [this] {
    return tr("a whole number from %L1 to %L2").arg(minimum()).arg(maximum());
  });
  connect(this, &QSpinBox::valueChanged, refusal, &SpinBoxRefusal::clear);
}

QValidator::State SpinBox::validate(QString& input, int& pos) const {
  const QValidator::State s = QSpinBox::validate(input, pos);
  return s == QValidator::Invalid ? QValidator::Intermediate : s;  // kept as typed, and refused
}

DoubleSpinBox::DoubleSpinBox(QWidget* parent) : QDoubleSpinBox(parent) {
  auto* refusal = SpinBoxRefusal::watch(this, lineEdit(), [this] {
    return tr("a number from %1 to %2").arg(textFromValue(minimum()), textFromValue(maximum()));
  });
  connect(this, &QDoubleSpinBox::valueChanged, refusal, &SpinBoxRefusal::clear);
}

QValidator::State DoubleSpinBox::validate(QString& input, int& pos) const {
  const QValidator::State s = QDoubleSpinBox::validate(input, pos);
  return s == QValidator::Invalid ? QValidator::Intermediate : s;
}

}  // namespace spillway::ui

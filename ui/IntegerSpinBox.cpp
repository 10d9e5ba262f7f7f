#include "IntegerSpinBox.h"

#include <QLineEdit>

#include "SpinBox.h"

namespace spillway::ui {

IntegerSpinBox::IntegerSpinBox(QWidget* parent) : QAbstractSpinBox(parent) {
  showValue();
  connect(lineEdit(), &QLineEdit::textEdited, this, [this](const QString& text) {
    quint64 v = 0;
    if (parse(text, &v) && v != value_) {
      value_ = v;
      emit valueChanged(value_);
    }
  });
  connect(this, &QAbstractSpinBox::editingFinished, this, &IntegerSpinBox::showValue);
  auto* refusal = SpinBoxRefusal::watch(
      this, lineEdit(), [this] { return tr("a whole number from %1 to %2").arg(min_).arg(max_); });
  connect(this, &IntegerSpinBox::valueChanged, refusal, &SpinBoxRefusal::clear);
}

void IntegerSpinBox::setValue(quint64 value) {
  const quint64 v = qBound(min_, value, max_);
  const bool changed = v != value_;
  value_ = v;
  showValue();
  if (changed) emit valueChanged(value_);
}

void IntegerSpinBox::setRange(quint64 min, quint64 max) {
  min_ = min;
  max_ = qMax(min, max);
  setValue(value_);
}

bool IntegerSpinBox::parse(const QString& text, quint64* value) const {
  bool ok = false;
  const quint64 v = text.trimmed().toULongLong(&ok);
  if (!ok || v < min_ || v > max_) return false;
  *value = v;
  return true;
}

// Text that is not a value of the range is Intermediate, never Invalid: it stays as typed, and
// the refusal says why (SpinBox.h).
QValidator::State IntegerSpinBox::validate(QString& input, int&) const {
  const QString t = input.trimmed();
  for (QChar c : t)
    if (!c.isDigit()) return QValidator::Intermediate;  // "+5", "-5", "5e3"
  quint64 v = 0;
  return parse(t, &v) ? QValidator::Acceptable : QValidator::Intermediate;
}

void IntegerSpinBox::fixup(QString& input) const {
  input = QString::number(value_);
}

void IntegerSpinBox::stepBy(int steps) {
  quint64 v = value_;
  if (steps > 0)
    v = max_ - v < static_cast<quint64>(steps) ? max_ : v + static_cast<quint64>(steps);
  if (steps < 0)
    v = v - min_ < static_cast<quint64>(-static_cast<qint64>(steps))
            ? min_
            : v - static_cast<quint64>(-static_cast<qint64>(steps));
  setValue(v);
}

QAbstractSpinBox::StepEnabled IntegerSpinBox::stepEnabled() const {
  StepEnabled e = StepNone;
  if (value_ > min_) e |= StepDownEnabled;
  if (value_ < max_) e |= StepUpEnabled;
  return e;
}

void IntegerSpinBox::showValue() {
  lineEdit()->setText(QString::number(value_));
}

}  // namespace spillway::ui

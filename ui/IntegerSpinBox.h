// IntegerSpinBox: a spin box for a job key whose range passes what QSpinBox (int) holds — a seed is
// any unsigned 64-bit value (data.seed, model.seed, train.seed), and a QSpinBox clamped it to
// 2^31 - 1 (a cloned run whose seed was larger came back with another one). It holds an unsigned
// 64-bit value between a minimum and a maximum, typed as digits or stepped with the arrows; other
// text is refused as SpinBox refuses it (SpinBox.h: kept as typed, the value unchanged, and said).
// GUI thread only; a plain widget owned by its parent.
#pragma once

#include <QAbstractSpinBox>
#include <QtGlobal>

namespace spillway::ui {

class IntegerSpinBox : public QAbstractSpinBox {
  Q_OBJECT

 public:
  explicit IntegerSpinBox(QWidget* parent = nullptr);

  quint64 value() const { return value_; }
  // Clamped to the range; emits valueChanged when it changes.
  void setValue(quint64 value);
  quint64 minimum() const { return min_; }
  quint64 maximum() const { return max_; }
  // The value is clamped into the new range.
  void setRange(quint64 min, quint64 max);

  QValidator::State validate(QString& input, int& pos) const override;
  void fixup(QString& input) const override;
  void stepBy(int steps) override;

 signals:
  void valueChanged(quint64 value);

 protected:
  StepEnabled stepEnabled() const override;

 private:
  // The typed text as a value, or false when it is not one of the range.
  bool parse(const QString& text, quint64* value) const;
  void showValue();

  quint64 value_ = 0, min_ = 0, max_ = 0;
};

}  // namespace spillway::ui

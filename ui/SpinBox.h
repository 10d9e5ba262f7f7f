// SpinBox, DoubleSpinBox: QSpinBox and QDoubleSpinBox that refuse, rather than reinterpret, text
// that is not a value of their range. QSpinBox drops a key its validator refuses and takes the
// rest, so "-5" typed in Steps became 5 without a word (issue 26). Here the text stays as typed
// and the value keeps its last valid one; the field's text turns red and a message under it says
// what the field takes ("Steps takes a whole number from 0 to 2,147,483,647: "-5" is not one.").
// When editing ends (Enter, or the focus leaves) the field shows its value again and the message
// says so ("-5" refused: Steps stays 300). The message is a tooltip, so that nothing below the
// field moves. IntegerSpinBox refuses the same way.
//
// SpinBoxRefusal is that behaviour, shared by the three: a QObject child of the box, which a form
// asks for the refusal (the message while the box's text is refused, "" otherwise) to refuse to be
// used as typed (NewRunPage::inputError), and which says when it changes.
//
// Thread-safety: GUI thread. Ownership: widgets owned by their parent; the refusal by its box.
#pragma once

#include <QDoubleSpinBox>
#include <QSpinBox>
#include <functional>

class QLineEdit;

namespace spillway::ui {

class SpinBoxRefusal : public QObject {
  Q_OBJECT

 public:
  // Watches `box`, whose line edit is `edit` and whose validate() answers Intermediate, never
  // Invalid, for the text it refuses (so that the text stays as typed). `takes` says what the
  // field takes: "a whole number from 0 to 100".
  static SpinBoxRefusal* watch(QAbstractSpinBox* box, QLineEdit* edit,
                               std::function<QString()> takes);
  // The refusal of `box`'s text, "" while it holds a value (or is not watched).
  static QString of(const QAbstractSpinBox* box);

  QString message() const { return message_; }
  // The box holds a value again (set by the program): the refusal ends, without a message.
  void clear();

 signals:
  void changed(const QString& message);

 private:
  SpinBoxRefusal(QAbstractSpinBox* box, std::function<QString()> takes);
  void edited(const QString& text);
  void finished();
  void set(const QString& message);
  // The field's name: the text of the form's label for it, else its job key.
  QString name() const;

  QAbstractSpinBox* box_;
  std::function<QString()> takes_;
  QString message_, refusedText_;
  QString fieldToolTip_;  // the box's tooltip, while the refusal is put before it
};

class SpinBox : public QSpinBox {
  Q_OBJECT

 public:
  explicit SpinBox(QWidget* parent = nullptr);
  QValidator::State validate(QString& input, int& pos) const override;
};

class DoubleSpinBox : public QDoubleSpinBox {
  Q_OBJECT

 public:
  explicit DoubleSpinBox(QWidget* parent = nullptr);
  QValidator::State validate(QString& input, int& pos) const override;
};

}  // namespace spillway::ui

// WheelGuard: the mouse wheel changes a spin box, a combo box or a slider only while that field has
// the keyboard focus; over any other, it scrolls the page (issue 26: scrolling New run over the
// micro-batch field turned 1 into 3). Every spin box and combo box of the application takes the
// focus by Tab or a click only (Qt::StrongFocus, where Qt's default, Qt::WheelFocus, let the wheel
// focus it and then change it), and a wheel event over such a field without the focus is passed on
// to its parents — the page's scroll area scrolls.
//
// One application-wide event filter, so that every field of every page and dialog is guarded,
// including those made later. Thread-safety: GUI thread. Ownership: the application owns it.
#pragma once

#include <QObject>

namespace spillway::ui {

class WheelGuard : public QObject {
  Q_OBJECT

 public:
  // Installs the filter on the application, once however often it is called; before the widgets
  // are made (their focus policy is set as they are polished).
  static void install();

  bool eventFilter(QObject* watched, QEvent* event) override;

 private:
  using QObject::QObject;
};

}  // namespace spillway::ui

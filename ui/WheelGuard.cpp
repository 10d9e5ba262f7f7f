#include "WheelGuard.h"

#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QEvent>
#include <QSlider>

namespace spillway::ui {
namespace {

// A field whose value the wheel steps: spin boxes (QSpinBox, QDoubleSpinBox, IntegerSpinBox),
// combo boxes and sliders (Compare's smoothing; not scroll bars, which are for the wheel).
QWidget* guarded(QObject* o) {
  if (qobject_cast<QAbstractSpinBox*>(o) || qobject_cast<QComboBox*>(o) ||
      qobject_cast<QSlider*>(o))
    return static_cast<QWidget*>(o);
  return nullptr;
}

}  // namespace

void WheelGuard::install() {
  QCoreApplication* app = QCoreApplication::instance();
  if (!app || app->findChild<WheelGuard*>(QString(), Qt::FindDirectChildrenOnly)) return;
  app->installEventFilter(new WheelGuard(app));
}

bool WheelGuard::eventFilter(QObject* watched, QEvent* event) {
  if (event->type() == QEvent::Polish) {
    // Before a field is first shown; Qt gives spin and combo boxes Qt::WheelFocus.
    if (QWidget* field = guarded(watched); field && field->focusPolicy() == Qt::WheelFocus)
      field->setFocusPolicy(Qt::StrongFocus);
  } else if (event->type() == QEvent::Wheel) {
    // Ignored and handled: QApplication passes an ignored wheel event on to the parent, as it does
    // for a widget that has no use for the wheel. The field's inner line edit passes it up to here.
    if (QWidget* field = guarded(watched); field && !field->hasFocus()) {
      event->ignore();
      return true;
    }
  }
  return QObject::eventFilter(watched, event);
}

}  // namespace spillway::ui

// spillway: the desktop app. The window and its pages live in ui/.
#include <QApplication>

#include "MainWindow.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Spillway");
  QApplication::setApplicationName("Spillway");
  spillway::ui::MainWindow window;
  window.show();
  return QApplication::exec();
}

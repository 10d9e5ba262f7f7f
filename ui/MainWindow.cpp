#include "MainWindow.h"

#include <QLabel>

namespace spillway::ui {

MainWindow::MainWindow(QWidget* parent) : QMainWindow(parent) {
  setWindowTitle(tr("Spillway"));
  auto* label = new QLabel(tr("Spillway — the desktop app arrives with the GUI issue."), this);
  label->setAlignment(Qt::AlignCenter);
  setCentralWidget(label);
  resize(1100, 720);
}

}  // namespace spillway::ui

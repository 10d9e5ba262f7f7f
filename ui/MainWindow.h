// MainWindow: the app's top-level window (pages: New run, Live, History, Compare — issue 4).
// Lives in the GUI thread; owns its pages through Qt parenting.
#pragma once

#include <QMainWindow>

namespace spillway::ui {

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  explicit MainWindow(QWidget* parent = nullptr);
};

}  // namespace spillway::ui

#include "AppPalette.h"

#include <QApplication>
#include <QProcess>
#include <QStandardPaths>
#include <QStyle>
#include <QStyleFactory>

namespace spillway::ui {
namespace {
QPalette& systemPalette() {
  static QPalette p = QApplication::palette();  // as the platform gave it, before any override
  return p;
}
}  // namespace

QPalette AppPalette::dark() {
  QPalette p;
  const QColor window(45, 45, 48), base(30, 30, 32), text(225, 225, 228), disabled(128, 128, 132),
      highlight(42, 130, 218);
  p.setColor(QPalette::Window, window);
  p.setColor(QPalette::WindowText, text);
  p.setColor(QPalette::Base, base);
  p.setColor(QPalette::AlternateBase, window);
  p.setColor(QPalette::ToolTipBase, window);
  p.setColor(QPalette::ToolTipText, text);
  p.setColor(QPalette::PlaceholderText, disabled);
  p.setColor(QPalette::Text, text);
  p.setColor(QPalette::Button, window);
  p.setColor(QPalette::ButtonText, text);
  p.setColor(QPalette::BrightText, Qt::red);
  p.setColor(QPalette::Link, highlight.lighter(130));
  p.setColor(QPalette::Highlight, highlight);
  p.setColor(QPalette::HighlightedText, Qt::white);
  p.setColor(QPalette::Light, window.lighter(150));
  p.setColor(QPalette::Midlight, window.lighter(125));
  p.setColor(QPalette::Mid, window.darker(120));
  p.setColor(QPalette::Dark, window.darker(150));
  p.setColor(QPalette::Shadow, Qt::black);
  for (auto role : {QPalette::WindowText, QPalette::Text, QPalette::ButtonText})
    p.setColor(QPalette::Disabled, role, disabled);
  return p;
}

bool AppPalette::desktopPrefersDark() {
  if (qEnvironmentVariable("GTK_THEME").endsWith(":dark", Qt::CaseInsensitive)) return true;
  const QString gsettings = QStandardPaths::findExecutable("gsettings");
  if (gsettings.isEmpty() || qEnvironmentVariableIsEmpty("DBUS_SESSION_BUS_ADDRESS")) return false;
  QProcess p;
  p.start(gsettings, {"get", "org.gnome.desktop.interface", "color-scheme"});
  if (!p.waitForFinished(1000)) return false;
  return p.readAllStandardOutput().contains("prefer-dark");
}

void AppPalette::apply(const QString& mode) {
  const QPalette original = systemPalette();
  const bool wantDark =
      mode == "dark" || (mode != "light" && !isDark(original) && desktopPrefersDark());
  if (wantDark) {
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(dark());
  } else if (mode == "light") {
    QApplication::setStyle(QStyleFactory::create("Fusion"));
    QApplication::setPalette(QApplication::style()->standardPalette());
  } else {
    QApplication::setPalette(original);
  }
}

}  // namespace spillway::ui

// AppPalette: the app's light or dark look. "system" keeps the platform's palette, switching to a
// dark Fusion palette when the desktop asks for dark and Qt 6.4's platform theme does not pass
// it on (GNOME's color-scheme setting, GTK_THEME=...:dark); "light" and "dark" force one.
// Charts follow through PlotTheme (QEvent::PaletteChange). GUI thread; stateless.
#pragma once

#include <QPalette>
#include <QString>

namespace spillway::ui {

class AppPalette {
 public:
  // mode: "system", "light" or "dark"; anything else counts as "system".
  static void apply(const QString& mode);
  static QPalette dark();
  // True when the desktop prefers a dark look (checked once per call; runs `gsettings` when
  // present).
  static bool desktopPrefersDark();
  static bool isDark(const QPalette& p) {
    return p.color(QPalette::Window).lightness() < p.color(QPalette::WindowText).lightness();
  }
};

}  // namespace spillway::ui

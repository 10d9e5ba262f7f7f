// The GUI tests need a QApplication (offscreen platform) before any widget exists.
#include <gtest/gtest.h>

#include <QApplication>
#include <QSettings>
#include <QTemporaryDir>

int main(int argc, char** argv) {
  qputenv("QT_QPA_PLATFORM",
          qgetenv("QT_QPA_PLATFORM").isEmpty() ? "offscreen" : qgetenv("QT_QPA_PLATFORM"));
  QApplication app(argc, argv);
  QApplication::setOrganizationName("SpillwayTest");
  QApplication::setApplicationName("SpillwayTest");
  // Settings (recent files, the window's geometry, the last form) in a folder of this process's,
  // never the user's ~/.config: a test neither reads what a person or another test run left nor
  // leaves anything behind.
  QTemporaryDir settingsDir;
  if (!settingsDir.isValid()) return 2;
  for (auto format : {QSettings::NativeFormat, QSettings::IniFormat})
    for (auto scope : {QSettings::UserScope, QSettings::SystemScope})
      QSettings::setPath(format, scope, settingsDir.path());
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

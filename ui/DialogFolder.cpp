#include "DialogFolder.h"

#include <QDir>
#include <QFileInfo>
#include <QSettings>

namespace spillway::ui {
namespace {

QString settingsKey(const QString& kind) {
  return "dialogs/" + kind;
}

// `path` when it is an existing folder, its folder when it is a file or a file to be (its folder
// exists), else "".
QString folderOf(const QString& path) {
  if (path.isEmpty() || QDir::isRelativePath(path)) return QString();
  const QFileInfo info(path);
  if (info.isDir()) return info.absoluteFilePath();
  const QFileInfo parent(info.absolutePath());
  return parent.isDir() ? parent.absoluteFilePath() : QString();
}

}  // namespace

QString DialogFolder::start(const QString& kind, const QString& current) {
  if (const QString f = folderOf(current.trimmed()); !f.isEmpty()) return f;
  const QString last = QSettings().value(settingsKey(kind)).toString();
  if (!last.isEmpty() && QFileInfo(last).isDir()) return last;
  return home();
}

QString DialogFolder::home() {
  return QFileInfo(QDir::homePath()).isDir() ? QDir::homePath() : QDir::rootPath();
}

QString DialogFolder::startFile(const QString& kind, const QString& fileName) {
  return QDir(start(kind)).filePath(fileName);
}

void DialogFolder::remember(const QString& kind, const QString& chosen) {
  if (const QString f = folderOf(chosen); !f.isEmpty()) QSettings().setValue(settingsKey(kind), f);
}

}  // namespace spillway::ui

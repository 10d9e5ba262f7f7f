// DialogFolder: where a file dialog opens. The folder of the path its field holds, else the folder
// last chosen in a dialog of the same kind (remembered in QSettings, "dialogs/<kind>", across
// sessions), else the home folder — never the working directory the app was started from, where
// Qt opens a dialog given no folder (issue 26).
//
// Kinds: "datasets", "models", "ssd" (the SSD scratch folder), "jobs" (job files), "exports"
// (Compare's charts and metrics).
//
// Thread-safety: GUI thread (QSettings of the application). Static functions only.
#pragma once

#include <QString>

namespace spillway::ui {

class DialogFolder {
 public:
  // The folder to open a `kind` dialog in. `current`: the field's path, a file or a folder; used
  // when it is absolute and it (or, for a file, its folder) exists.
  static QString start(const QString& kind, const QString& current = QString());
  // `start(kind)` joined with `fileName`: a save dialog's proposed file.
  static QString startFile(const QString& kind, const QString& fileName);
  // The home folder, or the file system's root where $HOME names no folder (Qt would open a
  // dialog given a missing folder in the working directory).
  static QString home();
  // Remembers where `chosen` is for the next `kind` dialog: a folder itself, a file its folder.
  // An empty `chosen` (the dialog was cancelled) changes nothing.
  static void remember(const QString& kind, const QString& chosen);
};

}  // namespace spillway::ui

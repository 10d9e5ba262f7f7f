// WorkerClient: how the GUI talks to spillway-worker — find the binary, run `plan` (blocking, a
// second or so), launch `train` detached in its own session so that closing or crashing the GUI
// loses nothing, and signal a running worker (SIGTERM: checkpoint and stop; SIGUSR1: checkpoint
// now; SIGSTOP/SIGCONT: pause). Stateless apart from the binary path; GUI thread.
#pragma once

#include <QByteArray>
#include <QString>
#include <QStringList>

#include "PlanResult.h"

namespace spillway::ui {

class WorkerClient {
 public:
  // The worker next to the GUI binary, then on PATH ($SPILLWAY_WORKER overrides both).
  static QString workerPath();
  static PlanResult plan(const QString& jobPath, int timeoutMs = 60000);
  // Starts `spillway-worker train JOB [--resume CHECKPOINT]` detached (setsid); returns its pid or
  // -1.
  static qint64 launch(const QString& jobPath, const QString& resumeFrom = QString(),
                       QString* error = nullptr);
  // The equivalent command line, for "Copy command line".
  static QString commandLine(const QString& jobPath);
  static bool signal(qint64 pid, int sig);
  static bool alive(qint64 pid);
  // True when the process is suspended (SIGSTOP: state T in /proc/PID/stat).
  static bool suspended(qint64 pid);
};

}  // namespace spillway::ui

// WorkerClient: how the GUI talks to spillway-worker — find the binary, run `plan` (blocking, a
// second or so), launch `train` detached in its own session so that closing or crashing the GUI
// loses nothing, and signal a running worker (SIGTERM: checkpoint and stop; SIGUSR1: checkpoint
// now; SIGSTOP/SIGCONT: pause), and read what a worker that has exited left behind (its stdout's
// last JSON line, its stderr). Stateless apart from the binary path and the output folders of the
// workers this process launched; GUI thread.
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
  // Starts `spillway-worker train JOB [--resume CHECKPOINT] [--run-id ID]` detached (setsid);
  // returns its pid or -1. `runId`: the run's id (a new run: its folder is
  // default_run_folder(runId), history/run-folder.h; a resume: the run to continue).
  static qint64 launch(const QString& jobPath, const QString& resumeFrom = QString(),
                       QString* error = nullptr, const QString& runId = QString());
  // What a worker printed before it exited, from `dir`/worker.out (its --json stdout: the last
  // line is {"status": "done"} or {"error": CODE, "message": TEXT}) and `dir`/worker.err (where a
  // worker run without --json reports "spillway-worker: TEXT", and a crash says what it can).
  // All empty when it left nothing (killed).
  struct LastWords {
    bool done = false;
    QString code;        // the worker's error code ("io", "invalid_argument", ...), "" when none
    QString message;     // the sentence it failed with, "" when none
    QString stderrTail;  // the last lines of worker.err, at most 5
  };
  static LastWords lastWords(const QString& dir);
  // The folder that holds worker.out and worker.err of a worker launch() started in this process
  // (the job file's folder); "" for any other pid.
  static QString outputDir(qint64 pid);
  // The equivalent command line, for "Copy command line".
  static QString commandLine(const QString& jobPath);
  static bool signal(qint64 pid, int sig);
  // A process with this pid exists and is not a zombie (a killed child not yet reaped is gone).
  static bool alive(qint64 pid);
  // True when the process is suspended (SIGSTOP: state T in /proc/PID/stat).
  static bool suspended(qint64 pid);
};

}  // namespace spillway::ui

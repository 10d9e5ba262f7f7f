// RunLauncher: New run's job files and the worker's start. A job file is the form as JSON that
// `spillway-worker train FILE` runs (JobSettings::toJson); Launch writes one into a new folder
// under the jobs folder and starts the worker on it, detached, under a run id chosen here (so that
// Live can watch the run's folder from the first moment); Copy command line writes one named by
// its content; File › Open and Save read and write one where the user says, checked by the
// worker's own job schema.
//
// Thread-safety: any thread for the file functions (no widgets); launch() and remember() use
// QSettings and start a process, so call them from the GUI thread. Ownership: none; all static.
#pragma once

#include <QCoreApplication>
#include <QString>
#include <QStringList>
#include <string>

#include "JobSettings.h"

namespace spillway::ui {

class RunLauncher {
  Q_DECLARE_TR_FUNCTIONS(RunLauncher)

 public:
  // The folder above the runs folder ($XDG_DATA_HOME/spillway), where jobs/ lies.
  static QString dataHome();
  // `job` as a job file at `path`, its folder made if need be, written whole or not at all. False
  // with `error` ("Cannot create FOLDER", "Cannot write PATH: why").
  static bool writeJobFile(const QString& path, const JobSettings& job, QString* error);
  // Reads a job file into `job`; relative model and data paths are taken from the file's folder,
  // and the run folder is cleared (a new run gets its own). False with `error`, `job` untouched,
  // for a file the worker would refuse: unreadable, not JSON, or refused by the job schema.
  static bool readJobFile(const QString& path, JobSettings* job, QString* error);
  // File › Save job file: `job` without a run folder at `path`, after the job schema's check.
  static bool saveJobFile(const QString& path, JobSettings job, QString* error);
  // Launch's: jobs/STAMP-NAME/job.json (one folder a run); returns its path, or "" with `error`.
  static QString writeRunJob(JobSettings job, QString* error);
  // Copy command line's: jobs/NAME-HASH.json, named by its content, without a run folder (each
  // run of the command gets its own); the same form again writes nothing new.
  static QString writeCommandLineJob(JobSettings job, QString* error);
  // Starts the worker on `jobPath` under a new run id, after writing kLaunchMarker beside it when
  // it is a launch folder of writeRunJob's. The run's folder in `runDir`, the worker's pid in
  // `pid`; false with `error`, the message for the user.
  static bool launch(const QString& jobPath, QString* runDir, qint64* pid, QString* error);
  // The launch folder's marker, written by launch() into a job's folder under jobs/:
  // {"run_id": ID}. It ties the folder (job.json, worker.out, worker.err) to its run, so that
  // deleting the run removes it, and proves the folder Spillway's.
  static constexpr const char* kLaunchMarker = "spillway-launch.json";
  struct Removed {
    QStringList kept;    // entries of the launch folder Spillway did not write (they stay)
    QStringList failed;  // its own files it could not remove, with why
  };
  // Removes the launch folder of run `runId` under `jobsDir` (the one whose kLaunchMarker names
  // it): job.json, worker.out, worker.err and the marker, then the folder when left empty.
  // Nothing when no folder names the run (a run launched from a terminal, or before 2026-11-27).
  // Any thread.
  static Removed removeLaunchFolder(const QString& jobsDir, const std::string& runId);
  // Puts `value` first in the QSettings list `key` (recent models, datasets), ten at most.
  static void remember(const QString& key, const QString& value);

 private:
  static QString slug(const QString& name);  // the name as a file name
};

}  // namespace spillway::ui

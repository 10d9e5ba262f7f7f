#include "WorkerClient.h"

#include <signal.h>

#include <QCoreApplication>
#include <QFile>
#include <QFileInfo>
#include <QProcess>
#include <QStandardPaths>

namespace spillway::ui {

QString WorkerClient::workerPath() {
  const QString env = qEnvironmentVariable("SPILLWAY_WORKER");
  if (!env.isEmpty()) return env;
  const QString dir = QCoreApplication::applicationDirPath();
  for (const QString& candidate : {dir + "/spillway-worker", dir + "/../app/spillway-worker",
                                   dir + "/../../app/spillway-worker"}) {
    if (QFileInfo(candidate).isExecutable()) return QFileInfo(candidate).canonicalFilePath();
  }
  return QStandardPaths::findExecutable("spillway-worker");
}

PlanResult WorkerClient::plan(const QString& jobPath, int timeoutMs) {
  QProcess p;
  p.start(workerPath(), {"plan", jobPath, "--json"});
  if (!p.waitForFinished(timeoutMs)) {
    PlanResult r;
    r.error = QObject::tr("spillway-worker plan did not finish: %1").arg(p.errorString());
    return r;
  }
  return PlanResult::fromWorkerOutput(p.readAllStandardOutput(), p.readAllStandardError(),
                                      p.exitCode());
}

qint64 WorkerClient::launch(const QString& jobPath, const QString& resumeFrom, QString* error) {
  const QString worker = workerPath();
  if (worker.isEmpty()) {
    if (error) *error = QObject::tr("spillway-worker was not found next to the app or on PATH");
    return -1;
  }
  QStringList args = {worker, "train", jobPath, "--json"};
  if (!resumeFrom.isEmpty()) args << "--resume" << resumeFrom;
  QProcess p;
  p.setProgram(QStandardPaths::findExecutable("setsid").isEmpty()
                   ? worker
                   : QStandardPaths::findExecutable("setsid"));
  if (p.program() == worker) args.removeFirst();
  p.setArguments(args);
  p.setStandardOutputFile(QFileInfo(jobPath).absolutePath() + "/worker.out");
  p.setStandardErrorFile(QFileInfo(jobPath).absolutePath() + "/worker.err");
  qint64 pid = -1;
  if (!p.startDetached(&pid)) {
    if (error) *error = p.errorString();
    return -1;
  }
  return pid;
}

QString WorkerClient::commandLine(const QString& jobPath) {
  return QString("%1 train %2")
      .arg(workerPath().isEmpty() ? "spillway-worker" : workerPath(), jobPath);
}

bool WorkerClient::signal(qint64 pid, int sig) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), sig) == 0;
}

bool WorkerClient::suspended(qint64 pid) {
  QFile f(QString("/proc/%1/stat").arg(pid));
  if (pid <= 0 || !f.open(QIODevice::ReadOnly)) return false;
  const QByteArray stat = f.readAll();
  // "pid (comm) S ...": the comm may hold spaces and parentheses, so the state follows the last
  // ')'.
  const qsizetype close = stat.lastIndexOf(')');
  return close >= 0 && close + 2 < stat.size() &&
         (stat[close + 2] == 'T' || stat[close + 2] == 't');
}

bool WorkerClient::alive(qint64 pid) {
  return pid > 0 && ::kill(static_cast<pid_t>(pid), 0) == 0;
}

}  // namespace spillway::ui

#include "WorkerClient.h"

#include <signal.h>

#include <QCoreApplication>
#include <QFile>
#include <QFileInfo>
#include <QHash>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QStandardPaths>
#include <algorithm>

namespace spillway::ui {
namespace {

// pid -> the folder of its worker.out / worker.err, for the workers launch() started.
QHash<qint64, QString>& launchedOutputs() {
  static QHash<qint64, QString> outputs;
  return outputs;
}

// /proc/PID/stat's state letter, or 0 when there is no such process. "pid (comm) S ...": the comm
// may hold spaces and parentheses, so the state follows the last ')'.
char processState(qint64 pid) {
  QFile f(QString("/proc/%1/stat").arg(pid));
  if (pid <= 0 || !f.open(QIODevice::ReadOnly)) return 0;
  const QByteArray stat = f.readAll();
  const qsizetype close = stat.lastIndexOf(')');
  return close >= 0 && close + 2 < stat.size() ? stat[close + 2] : 0;
}

// The last `n` non-empty lines of a file (read from its last 64 kB).
QList<QByteArray> lastLines(const QString& path, int n) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return {};
  if (f.size() > 65536) f.seek(f.size() - 65536);
  QList<QByteArray> lines;
  for (const QByteArray& l : f.readAll().split('\n'))
    if (!l.trimmed().isEmpty()) lines << l.trimmed();
  return lines.mid(std::max<qsizetype>(0, lines.size() - n));
}

}  // namespace

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

qint64 WorkerClient::launch(const QString& jobPath, const QString& resumeFrom, QString* error,
                            const QString& runId) {
  const QString worker = workerPath();
  if (worker.isEmpty()) {
    if (error) *error = QObject::tr("spillway-worker was not found next to the app or on PATH");
    return -1;
  }
  QStringList args = {worker, "train", jobPath, "--json"};
  if (!resumeFrom.isEmpty()) args << "--resume" << resumeFrom;
  if (!runId.isEmpty()) args << "--run-id" << runId;
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
  launchedOutputs().insert(pid, QFileInfo(jobPath).absolutePath());
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
  const char state = processState(pid);
  return state == 'T' || state == 't';
}

bool WorkerClient::alive(qint64 pid) {
  if (pid <= 0 || ::kill(static_cast<pid_t>(pid), 0) != 0) return false;
  const char state = processState(pid);
  return state != 'Z' && state != 'X';
}

QString WorkerClient::outputDir(qint64 pid) {
  return launchedOutputs().value(pid);
}

WorkerClient::LastWords WorkerClient::lastWords(const QString& dir) {
  LastWords w;
  if (dir.isEmpty()) return w;
  const QList<QByteArray> out = lastLines(dir + "/worker.out", 1);
  const QJsonObject last = out.isEmpty() ? QJsonObject() : QJsonDocument::fromJson(out[0]).object();
  w.done = last["status"].toString() == "done";
  if (last.contains("error")) {
    w.code = last["error"].toString();
    w.message = last["message"].toString();
  }
  QStringList tail;
  for (const QByteArray& l : lastLines(dir + "/worker.err", 5)) tail << QString::fromUtf8(l);
  w.stderrTail = tail.join('\n');
  const QString prefix = QStringLiteral("spillway-worker: ");
  if (w.message.isEmpty() && !tail.isEmpty() && tail.last().startsWith(prefix))
    w.message = tail.last().mid(prefix.size());
  return w;
}

}  // namespace spillway::ui

#include "RunLauncher.h"

#include <QCryptographicHash>
#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRegularExpression>
#include <QSaveFile>
#include <QSettings>

#include "WorkerClient.h"
#include "history/run-folder.h"
#include "history/run-store.h"
#include "job/job-schema.h"

namespace spillway::ui {

QString RunLauncher::dataHome() {
  auto runs = RunStore::default_runs_dir();
  return runs.ok() ? QFileInfo(QString::fromStdString(*runs)).absolutePath()
                   : QDir::homePath() + "/.local/share/spillway";
}

bool RunLauncher::writeJobFile(const QString& path, const JobSettings& job, QString* error) {
  if (!QDir().mkpath(QFileInfo(path).absolutePath()))
    return *error = tr("Cannot create %1").arg(QFileInfo(path).absolutePath()), false;
  QSaveFile f(path);
  if (!f.open(QIODevice::WriteOnly))
    return *error = tr("Cannot write %1: %2").arg(path, f.errorString()), false;
  f.write(job.toText());
  if (!f.commit()) return *error = tr("Cannot write %1: %2").arg(path, f.errorString()), false;
  return true;
}

bool RunLauncher::readJobFile(const QString& path, JobSettings* job, QString* error) {
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly)) return *error = tr("%1: %2").arg(path, f.errorString()), false;
  const QByteArray bytes = f.readAll();
  QJsonParseError pe;
  const QJsonDocument doc = QJsonDocument::fromJson(bytes, &pe);
  if (!doc.isObject())
    return *error = tr("%1: not a JSON object (%2)").arg(path, pe.errorString()), false;
  // The worker's own check: a key the schema does not know would be refused at launch, and a
  // form filled without it would not run what the file says.
  const nlohmann::json parsed = nlohmann::json::parse(
      bytes.constData(), bytes.constData() + bytes.size(), nullptr, /*allow_exceptions=*/false);
  const auto resolved = job::resolve_job(parsed);
  if (!resolved.ok())
    return *error = tr("%1 is not a job the worker takes: %2")
                        .arg(path, QString::fromStdString(resolved.status().message())),
           false;
  JobSettings s = JobSettings::fromJson(parsed);  // whole: a seed past 2^53 keeps its low bits
  const QDir base = QFileInfo(path).absoluteDir();
  for (QString* p : {&s.modelPath, &s.trainPath, &s.evalPath}) {
    if (!p->isEmpty() && QFileInfo(*p).isRelative())
      *p = QDir::cleanPath(base.absoluteFilePath(*p));
  }
  s.runDir.clear();  // a new run gets its own folder
  *job = s;
  return true;
}

bool RunLauncher::saveJobFile(const QString& path, JobSettings s, QString* error) {
  s.runDir.clear();
  const auto resolved = job::resolve_job(s.toJson());
  if (!resolved.ok()) return *error = QString::fromStdString(resolved.status().message()), false;
  return writeJobFile(path, s, error);
}

QString RunLauncher::slug(const QString& name) {
  QString s = name;
  s.replace(QRegularExpression("[^A-Za-z0-9_.-]+"), "-");
  return s;
}

QString RunLauncher::writeRunJob(JobSettings s, QString* error) {
  const QString stamp = QDateTime::currentDateTime().toString("yyyyMMdd-hhmmss");
  const QString folder = dataHome() + "/jobs/" + stamp + "-" + slug(s.name);
  // The job names no run folder: the worker names it by the run's id (history/run-folder.h),
  // the same folder whether the job is launched here or from a terminal.
  s.runDir.clear();
  const QString path = folder + "/job.json";
  return writeJobFile(path, s, error) ? path : QString();
}

QString RunLauncher::writeCommandLineJob(JobSettings s, QString* error) {
  // No run folder: each run of the command gets its own under the runs folder.
  const QByteArray json = s.toText();
  const QString hash =
      QString::fromLatin1(QCryptographicHash::hash(json, QCryptographicHash::Sha1).toHex().left(8));
  const QString path = dataHome() + "/jobs/" + slug(s.name) + "-" + hash + ".json";
  return writeJobFile(path, s, error) ? path : QString();
}

bool RunLauncher::launch(const QString& job, QString* runDir, qint64* pidOut, QString* error) {
  // The run's id, and so its folder, is chosen here so that Live can watch the folder from the
  // first moment; the worker records the run under it (--run-id).
  const std::string id = RunStore::new_run_id();
  const auto folder = default_run_folder(id);
  if (!folder.ok()) return *error = QString::fromStdString(folder.status().message()), false;
  // A launch folder of writeRunJob's (jobs/STAMP-NAME/job.json) gets the run's id, which deleting
  // the run looks for.
  const QFileInfo jobFile(job);
  if (jobFile.fileName() == "job.json" && QFileInfo(jobFile.absolutePath()).absolutePath() ==
                                              QDir(dataHome() + "/jobs").absolutePath()) {
    QSaveFile marker(jobFile.absolutePath() + "/" + kLaunchMarker);
    if (!marker.open(QIODevice::WriteOnly) ||
        marker.write(QJsonDocument(QJsonObject{{"run_id", QString::fromStdString(id)}}).toJson()) <
            0 ||
        !marker.commit())
      return *error = tr("Cannot write %1: %2").arg(marker.fileName(), marker.errorString()), false;
  }
  QString why;
  const qint64 pid = WorkerClient::launch(job, QString(), &why, QString::fromStdString(id));
  if (pid < 0) return *error = tr("Could not start the worker: %1").arg(why), false;
  *runDir = QString::fromStdString(*folder);
  *pidOut = pid;
  return true;
}

RunLauncher::Removed RunLauncher::removeLaunchFolder(const QString& jobsDir,
                                                     const std::string& runId) {
  Removed out;
  const QString id = QString::fromStdString(runId);
  for (const QFileInfo& d : QDir(jobsDir).entryInfoList(QDir::Dirs | QDir::NoDotAndDotDot)) {
    if (d.isSymLink()) continue;
    QFile marker(d.absoluteFilePath() + "/" + kLaunchMarker);
    if (!marker.open(QIODevice::ReadOnly)) continue;
    if (QJsonDocument::fromJson(marker.readAll()).object().value("run_id").toString() != id)
      continue;
    marker.close();
    QDir dir(d.absoluteFilePath());
    for (const QFileInfo& e :
         dir.entryInfoList(QDir::AllEntries | QDir::Hidden | QDir::System | QDir::NoDotAndDotDot)) {
      const QString n = e.fileName();
      const bool ours = !e.isDir() && (n == "job.json" || n == "worker.out" || n == "worker.err" ||
                                       n == kLaunchMarker);
      if (!ours) {
        out.kept << e.absoluteFilePath();
      } else if (!QFile::remove(e.absoluteFilePath())) {
        out.failed << e.absoluteFilePath();
      }
    }
    if (out.kept.isEmpty()) dir.rmdir(d.absoluteFilePath());
  }
  return out;
}

void RunLauncher::remember(const QString& key, const QString& value) {
  QSettings settings;
  QStringList list = settings.value(key).toStringList();
  list.removeAll(value);
  list.prepend(value);
  settings.setValue(key, list.mid(0, 10));
}

}  // namespace spillway::ui

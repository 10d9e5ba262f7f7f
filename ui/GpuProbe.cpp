#include "GpuProbe.h"

#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QtConcurrent/QtConcurrentRun>

#include "Format.h"
#include "WorkerClient.h"

namespace spillway::ui {

GpuProbe::GpuProbe(QObject* parent) : GpuProbe(askWorker, parent) {}

bool GpuProbe::askWorker(Device* device, QString* why) {
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) return *why = tr("spillway-worker was not found next to the app or on PATH"), false;
  QProcess p;
  p.start(worker, {"probe", "--gpu", "--json"});
  if (!p.waitForFinished(60000)) {
    p.kill();
    p.waitForFinished(1000);
    return *why = tr("spillway-worker probe --gpu did not answer: %1").arg(p.errorString()), false;
  }
  const QJsonObject a = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
  if (a.isEmpty())
    return *why = tr("spillway-worker probe --gpu: %1").arg(QString::fromUtf8(p.readAllStandardError()).trimmed()),
           false;
  if (!a["usable"].toBool()) return *why = a["why"].toString(), false;
  device->name = a["name"].toString();
  device->totalBytes = a["total_bytes"].toInteger();
  device->computeCapability = a["compute_capability"].toInt();
  return true;
}

GpuProbe::GpuProbe(ProbeFn probe, QObject* parent) : QObject(parent), probe_(std::move(probe)) {
  connect(&watcher_, &QFutureWatcher<Answer>::finished, this, [this] {
    answer_ = watcher_.result();
    done_ = true;
    emit finished(text());
  });
}

void GpuProbe::start() {
  if (started_) return;
  started_ = true;
  // The task holds its own copy of the probe: it may outlive this object.
  watcher_.setFuture(QtConcurrent::run([probe = probe_] {
    Answer a;
    a.usable = probe(&a.device, &a.why);
    return a;
  }));
}

QString GpuProbe::text() const {
  return done_ ? describe(answer_) : tr("probing GPU…");
}

QString GpuProbe::describe(const Answer& a) {
  if (!a.usable) {
    return tr("no usable GPU: %1").arg(a.why.isEmpty() ? tr("unknown reason") : a.why);
  }
  QString text = a.device.name;
  if (a.device.totalBytes > 0) text += " · " + formatBytes(static_cast<double>(a.device.totalBytes));
  if (a.device.computeCapability > 0) text += QString(" · sm_%1").arg(a.device.computeCapability);
  return text;
}

}  // namespace spillway::ui

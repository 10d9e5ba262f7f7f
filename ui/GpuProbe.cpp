#include "GpuProbe.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>

#include "Format.h"
#include "PoolTask.h"
#include "WorkerClient.h"

namespace spillway::ui {

GpuProbe::GpuProbe(QObject* parent) : GpuProbe(AnswerFn(), parent) {}

bool GpuProbe::askWorker(const QString& worker, Device* device, QString* why,
                         QVector<Device>* gpus) {
  if (worker.isEmpty())
    return *why = tr("spillway-worker was not found next to the app or on PATH"), false;
  QProcess p;
  p.start(worker, {"probe", "--gpu", "--json"});
  if (!p.waitForFinished(60000)) {
    p.kill();
    p.waitForFinished(1000);
    return *why = tr("spillway-worker probe --gpu did not answer: %1").arg(p.errorString()), false;
  }
  const QJsonObject a = QJsonDocument::fromJson(p.readAllStandardOutput()).object();
  if (a.isEmpty())
    return *why = tr("spillway-worker probe --gpu: %1")
                      .arg(QString::fromUtf8(p.readAllStandardError()).trimmed()),
           false;
  if (gpus) {
    for (const QJsonValue& v : a["gpus"].toArray()) {
      const QJsonObject g = v.toObject();
      Device d;
      d.index = g["index"].toInt();
      d.name = g["name"].toString();
      d.totalBytes = g["total_bytes"].toInteger();
      d.computeCapability = g["compute_capability"].toInt();
      d.pciBusId = g["pci_bus_id"].toString();
      d.attention = g["attention"].toString();
      d.usable = g["usable"].toBool(true);
      d.why = g["why"].toString();
      gpus->push_back(d);
    }
  }
  if (!a["usable"].toBool()) return *why = a["why"].toString(), false;
  device->name = a["name"].toString();
  device->totalBytes = a["total_bytes"].toInteger();
  device->computeCapability = a["compute_capability"].toInt();
  return true;
}

GpuProbe::GpuProbe(ProbeFn probe, QObject* parent)
    : GpuProbe(AnswerFn([probe = std::move(probe)] {
                 Answer a;
                 a.usable = probe(&a.device, &a.why);
                 return a;
               }),
               parent) {}

GpuProbe::GpuProbe(AnswerFn probe, QObject* parent) : QObject(parent), probe_(std::move(probe)) {}

void GpuProbe::start() {
  if (started_) return;
  started_ = true;
  AnswerFn probe = probe_;
  if (!probe) {
    // The worker's path is found here, on the GUI thread: WorkerClient::workerPath reads
    // QCoreApplication::applicationDirPath, which fills two caches without a lock
    // (qcoreapplication.cpp), so a pool thread calling it while the GUI thread does is a data race
    // (inside Qt, where TSan cannot see it).
    probe = [worker = WorkerClient::workerPath()] {
      Answer a;
      a.usable = askWorker(worker, &a.device, &a.why, &a.gpus);
      return a;
    };
  }
  // The task holds its own copy of the probe: it may outlive this object.
  runOnPool(
      this, [probe = std::move(probe)] { return probe(); },
      [this](Answer a) {
        answer_ = std::move(a);
        done_ = true;
        emit finished(text());
      });
}

QString GpuProbe::text() const {
  return done_ ? describe(answer_) : tr("probing GPU…");
}

QString GpuProbe::describe(const Answer& a) {
  if (!a.usable) {
    return tr("no usable GPU: %1").arg(a.why.isEmpty() ? tr("unknown reason") : a.why);
  }
  QString text = a.device.name;
  if (a.device.totalBytes > 0)
    text += " · " + formatBytes(static_cast<double>(a.device.totalBytes));
  if (a.device.computeCapability > 0) text += QString(" · sm_%1").arg(a.device.computeCapability);
  return text;
}

}  // namespace spillway::ui

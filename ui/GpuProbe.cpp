#include "GpuProbe.h"

#include <QtConcurrent/QtConcurrentRun>

#include "Format.h"
#include "compute/backend-loader.h"

namespace spillway::ui {

GpuProbe::GpuProbe(QObject* parent) : GpuProbe(compute::probe_cuda, parent) {}

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
    std::string why;
    a.usable = probe(&a.info, &why);
    a.why = QString::fromStdString(why);
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
  QString text = QString::fromStdString(a.info.name);
  if (a.info.total_bytes > 0) text += " · " + formatBytes(static_cast<double>(a.info.total_bytes));
  if (a.info.compute_capability > 0) text += QString(" · sm_%1").arg(a.info.compute_capability);
  return text;
}

}  // namespace spillway::ui

// GpuProbe: whether this machine has a usable CUDA GPU, for the New run page's backend choice.
// compute::probe_cuda loads the CUDA backend module and creates a device context, which takes up
// to a few seconds, so start() runs it once on Qt's thread pool and finished() brings the answer
// back to the GUI thread; text() says "probing GPU…" until then.
//
// Thread-safety: a GUI-thread object; only the probe function runs elsewhere (it must be safe to
// call from any thread, as probe_cuda is). Ownership: owns its future watcher; a probe still running
// when the object is destroyed finishes on the pool and its answer is dropped.
#pragma once

#include <QFutureWatcher>
#include <QObject>
#include <QString>
#include <functional>
#include <string>

#include "compute/backend.h"

namespace spillway::ui {

class GpuProbe : public QObject {
  Q_OBJECT
 public:
  struct Answer {
    bool usable = false;
    compute::DeviceInfo info;  // when usable
    QString why;               // when not: what is missing, as make_backend says it
  };
  // compute::probe_cuda's shape; tests pass a fake.
  using ProbeFn = std::function<bool(compute::DeviceInfo* info, std::string* why)>;

  explicit GpuProbe(QObject* parent = nullptr);
  GpuProbe(ProbeFn probe, QObject* parent);

  // Starts the probe (once: later calls do nothing).
  void start();
  bool done() const { return done_; }
  const Answer& answer() const { return answer_; }  // valid once done()
  // "probing GPU…" while running, then describe(answer()).
  QString text() const;

  // "NVIDIA H100 80GB HBM3 · 85.0 GB · sm_90" or "no usable GPU: <why>".
  static QString describe(const Answer& answer);

 signals:
  void finished(const QString& text);

 private:
  ProbeFn probe_;
  QFutureWatcher<Answer> watcher_;
  bool started_ = false;
  bool done_ = false;
  Answer answer_;
};

}  // namespace spillway::ui

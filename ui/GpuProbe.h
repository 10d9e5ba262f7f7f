// GpuProbe: whether this machine has a usable CUDA GPU, for the New run page's backend choice.
// The GUI does not load the CUDA module itself: it asks the worker (`spillway-worker probe --gpu
// --json`), which loads it and creates a device context — up to a few seconds — so start() runs
// the question once on Qt's thread pool (runOnPool, PoolTask.h) and finished() brings the answer
// back to the GUI thread; text() says "probing GPU…" until then.
//
// Thread-safety: a GUI-thread object; only the probe function runs elsewhere (it must be safe to
// call from any thread: askWorker is given the worker's path, which start() resolves on the GUI
// thread, because WorkerClient::workerPath reads QCoreApplication::applicationDirPath, whose cache
// Qt fills without a lock). Ownership: owns its answer; a probe still running when the object is
// destroyed finishes on the pool and its answer is dropped.
#pragma once

#include <QObject>
#include <QString>
#include <functional>

namespace spillway::ui {

class GpuProbe : public QObject {
  Q_OBJECT
 public:
  // The GPU the CUDA backend would use (device 0).
  struct Device {
    QString name;               // "NVIDIA H100 80GB HBM3"
    qint64 totalBytes = 0;      // its memory
    int computeCapability = 0;  // 90 for sm_90
  };
  struct Answer {
    bool usable = false;
    Device device;  // when usable
    QString why;    // when not: what is missing, as the worker says it
  };
  // True with `device` filled when a GPU is usable, else false with `why`; tests pass a fake.
  using ProbeFn = std::function<bool(Device* device, QString* why)>;

  // Probes with askWorker and the worker WorkerClient::workerPath() names when start() is called.
  explicit GpuProbe(QObject* parent = nullptr);
  GpuProbe(ProbeFn probe, QObject* parent);

  // Runs `WORKER probe --gpu --json` and reads its answer; blocks up to a minute, so call it off
  // the GUI thread. Safe on any thread (it touches no QCoreApplication state); `worker` "" says
  // that none was found.
  static bool askWorker(const QString& worker, Device* device, QString* why);

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
  ProbeFn probe_;  // empty: askWorker
  bool started_ = false;
  bool done_ = false;
  Answer answer_;
};

}  // namespace spillway::ui

// GpuProbe: whether this machine has a usable CUDA GPU, for the New run page's backend choice,
// and every GPU it has (by CUDA index, what placement.devices names), for its GPUs control.
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
#include <QVector>
#include <functional>

namespace spillway::ui {

class GpuProbe : public QObject {
  Q_OBJECT
 public:
  // A GPU: the one the CUDA backend would use (device 0), or one of the machine's.
  struct Device {
    int index = 0;              // CUDA device index
    QString name;               // "NVIDIA H100 80GB HBM3"
    qint64 totalBytes = 0;      // its memory
    int computeCapability = 0;  // 90 for sm_90
    QString pciBusId;           // "0000:01:00.0"
    QString attention;          // what runs attention: "cuDNN 9.19.0", "own kernels (why)"
    bool usable = true;         // false: the CUDA backend cannot run on it, `why` says why
    QString why;
  };
  struct Answer {
    bool usable = false;
    Device device;  // when usable
    QString why;    // when not: what is missing, as the worker says it
    // Every GPU of the machine in CUDA index order (the worker's "gpus"); empty without one.
    QVector<Device> gpus;
  };
  // True with `device` filled when a GPU is usable, else false with `why`; tests pass a fake.
  using ProbeFn = std::function<bool(Device* device, QString* why)>;
  // The whole answer, GPUs listed; tests pass a fake. Called on a pool thread.
  using AnswerFn = std::function<Answer()>;

  // Probes with askWorker and the worker WorkerClient::workerPath() names when start() is called.
  explicit GpuProbe(QObject* parent = nullptr);
  GpuProbe(ProbeFn probe, QObject* parent);
  GpuProbe(AnswerFn probe, QObject* parent);

  // Runs `WORKER probe --gpu --json` and reads its answer; blocks up to a minute, so call it off
  // the GUI thread. Safe on any thread (it touches no QCoreApplication state); `worker` "" says
  // that none was found. `gpus`, when given, receives the machine's GPUs (the worker's "gpus").
  static bool askWorker(const QString& worker, Device* device, QString* why,
                        QVector<Device>* gpus = nullptr);

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
  AnswerFn probe_;  // empty: askWorker
  bool started_ = false;
  bool done_ = false;
  Answer answer_;
};

}  // namespace spillway::ui

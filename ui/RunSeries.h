// RunSeries: the chart data of one run, built from its events.jsonl lines — bounded ring buffers
// (STYLE.md 11) of steps, evals, tier samples by category, link throughput, GPU telemetry, timeline
// spans and log lines. Filled by EventTail on the GUI thread's timer tick (parsing a tick's new
// lines is cheap); read by the Live and Compare pages. Not thread-safe.
#pragma once

#include <QMap>
#include <QString>
#include <QStringList>
#include <QVector>
#include <optional>

#include "events/events.h"
#include "events/plan.h"

namespace spillway::ui {

// A series that keeps at most `capacity` points, dropping the oldest quarter when full.
struct Ring {
  explicit Ring(int capacity = 20000) : cap(capacity) {}
  QVector<double> x, y;
  int cap;
  void append(double px, double py);
  int size() const { return x.size(); }
  // Drops the points from x = `from` on (a resumed run trains those steps again).
  void truncateFrom(double from);
  bool isEmpty() const { return x.isEmpty(); }
  // The latest value (a line break's NaN skipped); 0 when empty.
  double lastY() const;
  // Ends the line before the next point: a NaN point, which QCustomPlot draws as a gap.
  void breakLine(double px);
};

struct Span {
  int layer = -1;  // -1: not a transformer layer (embedding, head, whole step)
  QString block, phase;
  double start = 0, end = 0;
  // The GPU whose engine did the work in a data-parallel run (its CUDA index; the rank on the CPU
  // backend); -1 for the host's spans (optimizer, SSD, step) and for a one-GPU run's.
  int device = -1;
};

struct RunSeries {
  QString runId, state;
  qint64 totalSteps = 0, lastStep = 0, tokens = 0;
  double lastT = 0;
  // Per step, x = step. A resumed run's events.jsonl goes on from its checkpoint's step, which may
  // be earlier than its last: a step at or before the last one drawn replaces the points from it
  // on, so that the curve stays one line from step 1 (the abandoned steps are not drawn).
  Ring loss, lr, tokensPerSecond, tflops, stepSeconds, tokensAtStep, timeAtStep;
  Ring evalLoss;
  // Per sample, x = t (seconds): bytes by tier ("hbm", "dram", "ssd") and category. On "hbm" the
  // HBM state tier's master, gradients and moments are one category, "state" (present once a
  // sample carries the device's master or optimizer bytes), and "gradients" are the rest: the
  // gradient buffers the layers stream through.
  QMap<QString, QMap<QString, Ring>> tierBytes;
  QMap<QString, double> tierCapacity;  // bytes, 0 = unknown
  // The memory a tier's device reports in use, by tier: "hbm" from gpu_mem_used_bytes (the whole
  // GPU as NVML or cudaMemGetInfo see it, against the engine's own accounting in tierBytes).
  QMap<QString, Ring> tierMeasuredBytes;
  // Link and GPU rates break (a NaN point, drawn as a gap) where the samples stop for a while (a
  // paused or stalled worker): a line across the gap would show a rate nobody measured.
  QMap<QString, Ring> linkGbps;  // "h2d", "d2h", "ssd_read", "ssd_write"
  // GPU telemetry (NVML), x = t; a ring stays empty while the worker does not report its metric.
  Ring gpuUtilPct, gpuPowerW, gpuTempC;
  QMap<QString, Ring> pcieGbps;  // "rx" (host -> GPU), "tx" (GPU -> host)
  // Each GPU of the run (the samples' "gpus"), by CUDA index, x = t: its memory in use as NVML
  // sees it (bytes) and its utilisation (%). The rings above are the host's totals over them.
  QMap<int, Ring> gpuHbmBytes, gpuBusyPct;
  QVector<Span> spans;     // the most recent, bounded (the bound grows with the devices named)
  QList<int> spanDevices;  // the devices the spans named so far, ascending; empty for one GPU
  QStringList log;    // log and error lines, bounded (eval and checkpoint events are not repeated:
                      // the worker logs each of them itself)
  QString lastError;  // the message of the latest error event
  double lastSampleT = -1;   // t of the latest sample, -1 before the first
  qint64 logTotal = 0;       // lines ever appended; log holds the last log.size() of them
  std::optional<Plan> plan;  // the run's plan event (events/plan.h), once it came
  int lines = 0;

  // Applies one event (events/events.h); returns false for a line that is not a JSON object with a
  // type.
  bool apply(const QByteArray& line);
  void appendLog(const QString& line);  // keeps at most a bounded number of lines

 private:
  void applySample(const SampleEvent& e, double t);
  void applyDeviceCategories(const SampleTier& tier, double t);
};

}  // namespace spillway::ui

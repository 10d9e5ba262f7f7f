// PlanResult: the JSON of `spillway-worker plan --json` as the New run page shows it — a bar per
// tier (needed, free, total), the predicted step time, tokens/s, ETA and bottleneck, and when the
// job does not fit the reason that says what to change.
#pragma once

#include <QJsonObject>
#include <QString>
#include <QVector>

namespace spillway::ui {

struct TierBar {
  QString name;                            // "HBM", "DRAM", "SSD"
  double needed = 0, free = 0, total = 0;  // bytes; total 0 = unbounded
  bool fits() const { return total <= 0 && free <= 0 ? true : needed <= free; }
};

struct PlanResult {
  bool ok = false;  // parsed
  bool fits = false;
  QString reason;  // when !fits
  QString error;   // when the worker failed
  QVector<TierBar> tiers;
  double stepSeconds = 0, tokensPerSecond = 0, etaSeconds = 0;
  QString bottleneck;

  static PlanResult fromJson(const QJsonObject& plan);
  static PlanResult fromWorkerOutput(const QByteArray& stdoutBytes, const QByteArray& stderrBytes,
                                     int exitCode);
  QString summary() const;  // "step 0.31 s · 3,300 tokens/s · ETA 1 min 02 s · bottleneck compute"
};

}  // namespace spillway::ui

// PlanResult: the JSON of `spillway-worker plan --json` as the New run page shows it — a bar per
// tier (needed, free, total), the predicted step time, tokens/s, ETA and bottleneck, when the job
// does not fit the reason that says what to change, and the planner's suggested micro-batch and
// gradient accumulation (planner.h, suggest_batch).
#pragma once

#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <QVector>

namespace spillway::ui {

struct TierBar {
  QString name;                            // "HBM", "DRAM", "SSD"
  double needed = 0, free = 0, total = 0;  // bytes; total 0 = unbounded
  bool fits() const { return total <= 0 && free <= 0 ? true : needed <= free; }
};

// The plan's "suggestion": the micro-batch and accumulation the planner would run the job with.
struct BatchSuggestion {
  bool present = false;  // the plan carried one
  bool fits = false;     // false: nothing fits, `why` says what does not
  int microBatchSize = 0, gradAccum = 0;
  double tokensPerStep = 0, tokensPerSecond = 0, stepSeconds = 0, modelTflops = 0;
  bool sameAsJob = false;  // the job's own values
  QString why;             // one line: what a smaller step loses to, where the checkpoints go

  static BatchSuggestion fromJson(const QJsonObject& suggestion);
  // "Suggested: micro-batch 8 × 4 accumulation = 64K tokens/step, 9,900 tokens/s predicted — why"
  QString text() const;
};

struct PlanResult {
  bool ok = false;  // parsed
  bool fits = false;
  QString reason;  // when !fits
  QString error;   // when the worker failed
  QVector<TierBar> tiers;
  double stepSeconds = 0, tokensPerSecond = 0, etaSeconds = 0;
  QString bottleneck;
  BatchSuggestion suggestion;
  // After `plan --measure`: what the steps measured against the plan, one line per figure
  // ("step 6.50 s measured · 6.53 s planned (1.00×)"); empty for a plain plan.
  QStringList measured;

  static PlanResult fromJson(const QJsonObject& plan);
  static PlanResult fromWorkerOutput(const QByteArray& stdoutBytes, const QByteArray& stderrBytes,
                                     int exitCode);
  QString summary() const;  // "step 0.31 s · 3,300 tokens/s · ETA 1 min 02 s · bottleneck compute"
};

}  // namespace spillway::ui

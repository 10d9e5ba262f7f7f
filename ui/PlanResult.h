// PlanResult: the JSON of `spillway-worker plan --json` as the New run page shows it — a bar per
// tier (needed, free, total), the predicted step time, tokens/s, ETA and bottleneck, when the job
// does not fit the reason that says what to change, the planner's suggested micro-batch and
// gradient accumulation (planner.h, suggest_batch), and after `plan --measure N` each figure the
// steps measured against the plan's (run-figures.h, compare_figures).
#pragma once

#include <QJsonObject>
#include <QString>
#include <QStringList>
#include <QVector>
#include <QtNumeric>

#include "events/events.h"
#include "events/plan.h"

namespace spillway::ui {

struct TierBar {
  // "HBM", "DRAM", "SSD"; on the CPU backend the device tier is "Arena (CPU, in DRAM)"
  // (deviceTierName).
  QString name;
  double needed = 0, free = 0, total = 0;  // bytes; total 0 = unbounded
  // What the process holds there whatever the job (CUDA context, libraries, the data): outside
  // `free` already, so not in fits(), but in the peak the bar shows (planner.h,
  // kCpuRuntimeDramBytes and beside it). 0 where the plan has none (SSD).
  double runtime = 0;
  bool fits() const { return total <= 0 && free <= 0 ? true : needed <= free; }
  // "needs 288.6 MB (18.6 MB for the job + about 270.0 MB runtime) · free 24.0 GB · total 25.3 GB"
  QString text() const;
};

// The device tier's name: "HBM" on a GPU, "Arena (CPU, in DRAM)" on the CPU backend (whose
// "device" is an arena in host memory), as Plan, Live, History and Compare show it.
QString deviceTierName(bool onCpu);

// The plan's "suggestion": the micro-batch and accumulation the planner would run the job with.
struct BatchSuggestion {
  bool present = false;  // the plan carried one
  bool fits = false;     // false: nothing fits, `why` says what does not
  int microBatchSize = 0, gradAccum = 0;
  double tokensPerStep = 0, tokensPerSecond = 0, stepSeconds = 0, modelTflops = 0;
  bool sameAsJob = false;  // the job's own values
  QString why;             // one line: what a smaller step loses to, where the checkpoints go

  static BatchSuggestion fromPlan(const PlanSuggestion& suggestion);
  static BatchSuggestion fromJson(const QJsonObject& suggestion);  // through PlanSuggestion
  // "Suggested: micro-batch 8 × 4 accumulation = 64K tokens/step, 9,900 tokens/s predicted — why"
  QString text() const;
};

// One figure of `plan --measure` against the plan: the versus_plan entry of its key. NaN where the
// worker gave null (not predicted, not measured: the CPU backend has no HBM; ratio: either absent).
struct MeasuredFigure {
  enum class Unit { Seconds, PerSecond, Bytes, BytesPerStep };
  StepFigure figure = StepFigure::kStepS;
  QString key;   // step_figure_key(figure): "step_s", "tokens_per_s", "peak_hbm_bytes", ...
  QString name;  // "Step time", "Tokens/s", "Peak HBM", ...
  Unit unit = Unit::Seconds;
  double predicted = qQNaN(), measured = qQNaN(), ratio = qQNaN();  // ratio = measured / predicted
  // The step times the bytes per step are spread over, for a link rate (NaN: no rate shown).
  double predictedStepSeconds = qQNaN(), measuredStepSeconds = qQNaN();

  // Outside the planner's ±10%: measured / predicted below 0.9 or above 1.1.
  static constexpr double kTolerance = 0.10;
  bool offPlan() const {
    return !qIsNaN(ratio) && (ratio < 1 - kTolerance || ratio > 1 + kTolerance);
  }
  // "1.25 s", "3,732", "300.7 MB", "2.08 MB (30.4 MB/s)"; "—" where absent.
  QString predictedText() const { return text(predicted, predictedStepSeconds); }
  QString measuredText() const { return text(measured, measuredStepSeconds); }
  QString ratioText() const;  // "1.13×", "—"
  QString text(double value, double stepSeconds) const;
};

struct PlanResult {
  bool ok = false;  // parsed
  bool fits = false;
  QString reason;          // when !fits
  QString error;           // when the worker failed
  bool onCpu = false;      // the CPU backend: its device tier is an arena in DRAM
  bool calibrated = true;  // false: the step time rests on a rate not probed here (a rough guess)
  QVector<TierBar> tiers;
  double stepSeconds = 0, tokensPerSecond = 0, etaSeconds = 0;
  qint64 totalSteps = 0;  // the job's steps the ETA is for; 0: not known (steps from epochs)
  QString bottleneck;
  BatchSuggestion suggestion;
  // After `plan --measure`: what the steps measured against the plan, in the worker's order (step
  // time, tokens/s, peak HBM, peak DRAM, H2D and D2H bytes per step); empty for a plain plan.
  QVector<MeasuredFigure> measured;
  int measuredSteps = 0;  // the steps trained (the figures are of those after the first)

  static PlanResult fromPlan(const Plan& plan);
  static PlanResult fromJson(const QJsonObject& plan);  // through plan_from_json
  static PlanResult fromWorkerOutput(const QByteArray& stdoutBytes, const QByteArray& stderrBytes,
                                     int exitCode);
  // "Predicted: step 0.31 s · 3,300 tokens/s · ETA 1 min 02 s for 200 steps · bottleneck
  // compute"; no step time or ETA for a job that does not fit.
  QString summary() const;
};

}  // namespace spillway::ui

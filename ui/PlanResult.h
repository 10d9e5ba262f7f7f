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

// One part of a tier's bytes: a category of the plan's tier ("weights", "gradients", "master",
// "optimizer", "checkpoints", "workspace"), or on the device tier "state": the HBM state tier's
// master, gradients and moments together (StatePlacement).
struct TierPart {
  QString category;
  double bytes = 0;
};

struct TierBar {
  // "HBM", "DRAM", "SSD"; on the CPU backend the device tier is "Arena (CPU, in DRAM)"
  // (deviceTierName).
  QString name;
  double needed = 0, free = 0, total = 0;  // bytes; total 0 = unbounded
  // What the process holds there whatever the job (CUDA context, libraries, the data): outside
  // `free` already, so not in fits(), but in the peak the bar shows (planner.h,
  // kCpuRuntimeDramBytes and beside it). 0 where the plan has none (SSD).
  double runtime = 0;
  // What `needed` is made of, in the order the bar draws it; the parts of 0 bytes left out. On
  // the device tier: the state, weights, gradient buffers, checkpoints and workspace (one
  // micro-batch's activations among it).
  QVector<TierPart> parts;
  bool fits() const { return total <= 0 && free <= 0 ? true : needed <= free; }
  // "needs 288.6 MB (18.6 MB for the job + about 270.0 MB runtime) · free 24.0 GB · total 25.3 GB"
  QString text() const;
};

// The device tier's name: "HBM" on a GPU, "Arena (CPU, in DRAM)" on the CPU backend (whose
// "device" is an arena in host memory), as Plan, Live, History and Compare show it.
QString deviceTierName(bool onCpu);

// Where each block's training state (fp32 master, gradients, AdamW moments) lives, from the
// plan's "state" (events/plan.h, PlanState): the first hbmBlocks blocks in forward order
// (embedding, layers, head) in HBM, the others in DRAM — or, where the plan's SSD tier holds
// their moments or master, partly on the SSD. A plan from before the HBM state tier has no
// "state": its blocks (layers + 2) all read as the other tier.
struct StatePlacement {
  // kSsdMoments: the master in DRAM, the moments on the SSD; kSsd: both on the SSD.
  enum class Tier { kHbm, kDram, kSsdMoments, kSsd };
  int blocks = 0;     // embedding + layers + head; 0: the plan does not say (no model)
  int hbmBlocks = 0;  // the first hbmBlocks of them in HBM
  // The host tiers in block order (events/plan.h, PlanState): the first dramBlocks in DRAM, the
  // next ssdMomentsBlocks with the moments on the SSD, the rest (ssd_blocks) with both there. A
  // plan from before the per-block tiers has none: dramBlocks -1, and every block past the HBM
  // ones in `rest`.
  int dramBlocks = -1, ssdMomentsBlocks = 0;
  Tier rest = Tier::kDram;
  double hbmBytes = 0;  // the HBM blocks' state, bytes
  QString why;          // the planner's one line: why that many in HBM
  QString hostWhy;      // and which blocks sit in which host tier, and why
  bool onCpu = false;   // the CPU backend: no HBM, its blocks' state is in DRAM
  // Saved activations (PlanState::saved_activation_layers, mlp_recompute_layers): the last
  // savedLayers keep every activation, the mlpLayers before them all but the MLP's.
  int savedLayers = 0, mlpLayers = 0;

  static StatePlacement fromPlan(const Plan& plan);
  Tier tierOf(int block) const {
    if (block < hbmBlocks) return Tier::kHbm;
    if (dramBlocks < 0) return rest;
    if (block < dramBlocks) return Tier::kDram;
    return block < dramBlocks + ssdMomentsBlocks ? Tier::kSsdMoments : Tier::kSsd;
  }
  int count(Tier tier) const;
  // "embedding", "layer 0" ... "layer 31", "head"
  QString blockName(int block) const;
  // "HBM state: 18 of 34 blocks"; "" when the plan does not say how many blocks there are.
  QString text() const;
  // "2 layers whole, 25 without the MLP's", "none": what the backward does not recompute.
  QString savedText() const;
};

// The GPUs a run's plan spread its steps over (events/plan.h, PlanDevices), for History's GPUs
// column and Compare's row. A plan from before data parallel has no "devices": one GPU.
struct DeviceUse {
  int count = 0;         // 0: no plan found
  QVector<int> indices;  // CUDA indices, rank order; empty when the plan does not list them
  int machines = 1;      // past one machine: each ran `count` GPUs
  static DeviceUse fromPlan(const Plan& plan);
  // "1" (one GPU, GPU 0 or unnamed), "2 (0, 1)", "1 (3)", "2 (0, 1) × 4 machines"; "—" without
  // a plan.
  QString text() const;
  // Every GPU of the run, over its machines (0: no plan found).
  int total() const { return count * machines; }
};

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
  StatePlacement state;  // where the blocks' master, gradients and moments live
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

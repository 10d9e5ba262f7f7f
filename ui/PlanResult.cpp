#include "PlanResult.h"

#include <QJsonDocument>
#include <QLocale>
#include <QObject>
#include <algorithm>
#include <climits>
#include <tuple>

#include "Format.h"

namespace spillway::ui {

namespace {

// A QJsonObject as the engine's JSON, for the from_json of events/.
nlohmann::json toJson(const QJsonObject& o) {
  const QByteArray text = QJsonDocument(o).toJson(QJsonDocument::Compact);
  return nlohmann::json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
}

// null (absent) as NaN, never 0.
double orNaN(const std::optional<double>& v) {
  return v ? *v : qQNaN();
}

double bytesOf(const std::optional<uint64_t>& v) {
  return static_cast<double>(v.value_or(0));
}

void addPart(QVector<TierPart>* parts, const char* category, double bytes) {
  if (bytes > 0) parts->push_back({QString::fromLatin1(category), bytes});
}

// A host tier's parts: its categories as the plan gives them.
QVector<TierPart> categoryParts(const PlanTier& t) {
  QVector<TierPart> parts;
  addPart(&parts, "master", bytesOf(t.master_bytes));
  addPart(&parts, "gradients", bytesOf(t.gradients_bytes));
  addPart(&parts, "optimizer", bytesOf(t.optimizer_bytes));
  addPart(&parts, "weights", bytesOf(t.weights_bytes));
  addPart(&parts, "checkpoints", bytesOf(t.checkpoints_bytes));
  addPart(&parts, "workspace", bytesOf(t.workspace_bytes));
  return parts;
}

// The device tier's parts: the HBM state tier as one part (its master, gradients and moments:
// state.hbm_bytes, or the master and optimizer the tier lists where a plan gives no total), then
// the weight slots, the gradient buffers, the checkpoints, the saved activations and the
// workspace. The gradient buffers are what the tier needs beyond the other parts, so that the
// state's gradients, which a plan may count under the tier's gradients, are not drawn twice.
QVector<TierPart> deviceParts(const Plan& plan) {
  const PlanTier& t = plan.hbm;
  const double state = std::max(static_cast<double>(plan.state.hbm_bytes),
                                bytesOf(t.master_bytes) + bytesOf(t.optimizer_bytes));
  const double weights = bytesOf(t.weights_bytes), checkpoints = bytesOf(t.checkpoints_bytes),
               activations = bytesOf(t.activations_bytes), workspace = bytesOf(t.workspace_bytes);
  const double rest =
      static_cast<double>(t.needed_bytes) - state - weights - checkpoints - activations - workspace;
  QVector<TierPart> parts;
  addPart(&parts, "state", state);
  addPart(&parts, "weights", weights);
  addPart(&parts, "gradients", rest > 0 ? rest : state > 0 ? 0 : bytesOf(t.gradients_bytes));
  addPart(&parts, "checkpoints", checkpoints);
  addPart(&parts, "activations", activations);
  addPart(&parts, "workspace", workspace);
  return parts;
}

}  // namespace

StatePlacement StatePlacement::fromPlan(const Plan& plan) {
  StatePlacement s;
  s.onCpu = plan.on_cpu();
  // Before the HBM state tier a plan has no "state": its blocks are the model's layers, the
  // embedding and the head, all of them off the device.
  s.blocks = plan.state.blocks > 0 ? plan.state.blocks
                                   : (plan.model.layers > 0 ? plan.model.layers + 2 : 0);
  s.hbmBlocks = std::clamp(plan.state.hbm_blocks, 0, s.blocks);
  s.hbmBytes = static_cast<double>(plan.state.hbm_bytes);
  s.why = QString::fromStdString(plan.state.why);
  s.hostWhy = QString::fromStdString(plan.state.host_why);
  s.savedLayers = plan.state.saved_activation_layers;
  s.mlpLayers = plan.state.mlp_recompute_layers;
  const PlanState& st = plan.state;
  if (st.dram_blocks + st.ssd_moments_blocks + st.ssd_blocks == s.blocks && s.blocks > 0) {
    s.dramBlocks = st.dram_blocks;
    s.ssdMomentsBlocks = st.ssd_moments_blocks;
  } else if (plan.ssd.master_bytes.value_or(0) > 0) {
    s.rest = Tier::kSsd;
  } else if (plan.ssd.optimizer_bytes.value_or(0) > 0) {
    s.rest = Tier::kSsdMoments;
  }
  return s;
}

int StatePlacement::count(Tier tier) const {
  int n = 0;
  for (int b = 0; b < blocks; ++b) n += tierOf(b) == tier;
  return n;
}

QString StatePlacement::blockName(int block) const {
  if (block == 0) return QObject::tr("embedding");
  if (block == blocks - 1) return QObject::tr("head");
  return QObject::tr("layer %1").arg(block - 1);
}

QString StatePlacement::text() const {
  if (blocks <= 0) return {};
  return QObject::tr("HBM state: %1 of %2 blocks").arg(hbmBlocks).arg(blocks);
}

QString StatePlacement::savedText() const {
  QStringList parts;
  if (savedLayers > 0)
    parts << (savedLayers == 1 ? QObject::tr("1 layer whole")
                               : QObject::tr("%1 layers whole").arg(savedLayers));
  if (mlpLayers > 0) parts << QObject::tr("%1 without the MLP's").arg(mlpLayers);
  return parts.isEmpty() ? QObject::tr("none") : parts.join(QStringLiteral(", "));
}

DeviceUse DeviceUse::fromPlan(const Plan& plan) {
  DeviceUse d;
  d.count = std::max(1, plan.devices.count);
  for (int i : plan.devices.indices) d.indices << i;
  d.machines = std::max(1, plan.devices.machines);
  return d;
}

QString DeviceUse::text() const {
  if (count <= 0) return QStringLiteral("—");
  const QString across = machines > 1 ? QObject::tr(" × %1 machines").arg(machines) : QString();
  // One GPU, the first (or not named, as before data parallel): the count alone.
  if (indices.isEmpty() || (count == 1 && indices == QVector<int>{0}))
    return QString::number(count) + across;
  QStringList names;
  for (int i : indices) names << QString::number(i);
  return QStringLiteral("%1 (%2)").arg(count).arg(names.join(", ")) + across;
}

PlanResult PlanResult::fromPlan(const Plan& plan) {
  PlanResult r;
  r.ok = true;
  r.fits = plan.fits;
  r.reason = QString::fromStdString(plan.reason);
  r.onCpu = plan.on_cpu();
  r.calibrated = plan.step.calibrated;
  r.state = StatePlacement::fromPlan(plan);
  for (const auto& [tier, label] : {std::pair{&plan.hbm, deviceTierName(r.onCpu)},
                                    std::pair{&plan.dram, QStringLiteral("DRAM")},
                                    std::pair{&plan.ssd, QStringLiteral("SSD")}}) {
    TierBar bar{label,
                static_cast<double>(tier->needed_bytes),
                static_cast<double>(tier->free_bytes),
                static_cast<double>(tier->total_bytes),
                static_cast<double>(tier->runtime_bytes.value_or(0)),
                tier == &plan.hbm ? deviceParts(plan) : categoryParts(*tier)};
    r.tiers.push_back(bar);
  }
  r.stepSeconds = plan.step.step_s;
  r.tokensPerSecond = plan.step.tokens_per_s;
  r.etaSeconds = plan.step.eta_s;
  r.totalSteps = plan.step.total_steps;
  r.bottleneck = QString::fromStdString(plan.step.bottleneck);
  if (plan.suggestion) r.suggestion = BatchSuggestion::fromPlan(*plan.suggestion);
  return r;
}

PlanResult PlanResult::fromJson(const QJsonObject& json) {
  const Result<Plan> plan = plan_from_json(toJson(json));
  if (!plan.ok()) {
    PlanResult r;
    r.error = QObject::tr("The plan is missing 'fits' or 'tiers'.");
    return r;
  }
  return fromPlan(*plan);
}

BatchSuggestion BatchSuggestion::fromPlan(const PlanSuggestion& s) {
  BatchSuggestion b;
  b.present = true;
  b.fits = s.fits;
  b.why = QString::fromStdString(s.why);
  if (!b.fits) return b;
  b.microBatchSize = s.micro_batch_size;
  b.gradAccum = s.grad_accum;
  b.tokensPerStep = static_cast<double>(s.tokens_per_step);
  b.tokensPerSecond = s.tokens_per_s;
  b.stepSeconds = s.step_s;
  b.modelTflops = s.model_tflops;
  b.sameAsJob = s.same_as_job;
  b.fits = b.microBatchSize > 0 && b.gradAccum > 0;
  return b;
}

BatchSuggestion BatchSuggestion::fromJson(const QJsonObject& s) {
  return fromPlan(plan_suggestion_from_json(toJson(s)));
}

QString BatchSuggestion::text() const {
  if (!present) return {};
  if (!fits) return QObject::tr("Suggested: nothing — %1").arg(why);
  const qint64 tokens = static_cast<qint64>(tokensPerStep);
  const QString perStep =
      tokens % 1024 == 0 ? QString("%1K").arg(tokens / 1024) : QLocale().toString(tokens);
  return QObject::tr(
             "Suggested: micro-batch %1 × %2 accumulation = %3 tokens/step, %4 tokens/s "
             "predicted%5 — %6")
      .arg(microBatchSize)
      .arg(gradAccum)
      .arg(perStep, QLocale().toString(tokensPerSecond, 'f', 0),
           sameAsJob ? QObject::tr(" (the job's own)") : QString(), why);
}

PlanResult PlanResult::fromWorkerOutput(const QByteArray& out, const QByteArray& err,
                                        int exitCode) {
  const QByteArray last = out.trimmed().split('\n').last();
  const QJsonDocument doc = QJsonDocument::fromJson(last);
  if (doc.isObject()) {
    const nlohmann::json j = toJson(doc.object());
    if (const Result<Plan> plan = plan_from_json(j); plan.ok()) return fromPlan(*plan);
    const MeasuredEvent measured = measured_event_from_json(j);  // plan --measure
    if (measured.plan) {
      PlanResult r = fromPlan(*measured.plan);
      r.measuredSteps = static_cast<int>(std::clamp<int64_t>(measured.steps, 0, INT_MAX));
      using Unit = MeasuredFigure::Unit;
      const std::tuple<StepFigure, const char*, Unit> rows[] = {
          {StepFigure::kStepS, QT_TR_NOOP("Step time"), Unit::Seconds},
          {StepFigure::kTokensPerS, QT_TR_NOOP("Tokens/s"), Unit::PerSecond},
          {StepFigure::kPeakHbmBytes, QT_TR_NOOP("Peak HBM"), Unit::Bytes},
          {StepFigure::kPeakDramBytes, QT_TR_NOOP("Peak DRAM"), Unit::Bytes},
          {StepFigure::kH2dBytes, QT_TR_NOOP("H2D per step"), Unit::BytesPerStep},
          {StepFigure::kD2hBytes, QT_TR_NOOP("D2H per step"), Unit::BytesPerStep}};
      const FigureComparison& step = measured.versus_plan[StepFigure::kStepS];
      for (const auto& [figure, name, unit] : rows) {
        const FigureComparison& f = measured.versus_plan[figure];
        MeasuredFigure m;
        m.figure = figure;
        m.key = step_figure_key(figure);
        // The CPU backend's device is an arena in DRAM, not HBM.
        m.name = figure == StepFigure::kPeakHbmBytes && r.onCpu
                     ? QObject::tr("Peak arena (CPU, in DRAM)")
                     : QObject::tr(name);
        m.unit = unit;
        m.predicted = orNaN(f.predicted);
        m.measured = orNaN(f.measured);
        m.ratio = orNaN(f.ratio);
        if (unit == Unit::BytesPerStep) {
          m.predictedStepSeconds = orNaN(step.predicted);
          m.measuredStepSeconds = orNaN(step.measured);
        }
        r.measured << m;
      }
      return r;
    }
  }
  PlanResult r;
  if (doc.isObject() && doc.object().contains("message")) {
    r.error = doc.object()["message"].toString();
  } else {
    r.error = QString::fromUtf8(err).trimmed();
    if (r.error.isEmpty())
      r.error = QObject::tr("spillway-worker plan exited with code %1").arg(exitCode);
  }
  return r;
}

QString MeasuredFigure::text(double value, double stepSeconds) const {
  if (qIsNaN(value)) return QStringLiteral("—");
  switch (unit) {
    case Unit::Seconds:
      return formatDuration(value);
    case Unit::PerSecond:
      return QLocale().toString(value, 'f', 0);
    case Unit::Bytes:
      return formatBytes(value);
    case Unit::BytesPerStep:
      // The link's rate over the whole step: what the bytes per step ask of it on average.
      if (qIsNaN(stepSeconds) || stepSeconds <= 0) return formatBytes(value);
      return QObject::tr("%1 (%2/s)").arg(formatBytes(value), formatBytes(value / stepSeconds));
  }
  return {};
}

QString MeasuredFigure::ratioText() const {
  return qIsNaN(ratio) ? QStringLiteral("—") : QStringLiteral("%1×").arg(ratio, 0, 'f', 2);
}

QString deviceTierName(bool onCpu) {
  return onCpu ? QObject::tr("Arena (CPU, in DRAM)") : QStringLiteral("HBM");
}

QString TierBar::text() const {
  const QString room = QObject::tr(" · free %1 · total %2")
                           .arg(free > 0 ? formatBytes(free) : QObject::tr("unbounded"),
                                total > 0 ? formatBytes(total) : QObject::tr("unbounded"));
  if (runtime <= 0) return QObject::tr("needs %1").arg(formatBytes(needed)) + room;
  return QObject::tr("needs %1 (%2 for the job + about %3 runtime)")
             .arg(formatBytes(needed + runtime), formatBytes(needed), formatBytes(runtime)) +
         room;
}

QString PlanResult::summary() const {
  if (!ok) return error;
  // A step time and an ETA for a job that cannot run would be a promise: none.
  if (!fits) return QObject::tr("Does not fit (below): no step time or ETA.");
  const QString eta =
      totalSteps > 0
          ? QObject::tr("ETA %1 for %2 steps")
                .arg(formatDuration(etaSeconds), QLocale().toString(totalSteps))
          : QObject::tr("ETA when the steps are known (the job counts them from its epochs)");
  const QString figures = QObject::tr("step %1 · %2 tokens/s · %3 · bottleneck %4")
                              .arg(formatDuration(stepSeconds),
                                   QLocale().toString(tokensPerSecond, 'f', 0), eta, bottleneck);
  return calibrated
             ? QObject::tr("Predicted: %1").arg(figures)
             : QObject::tr("Rough estimate, not calibrated on this machine: %1").arg(figures);
}

}  // namespace spillway::ui

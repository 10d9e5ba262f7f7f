#include "PlanResult.h"

#include <QJsonDocument>
#include <QLocale>
#include <QObject>
#include <tuple>

#include "Format.h"

namespace spillway::ui {

PlanResult PlanResult::fromJson(const QJsonObject& plan) {
  PlanResult r;
  if (!plan.contains("fits") || !plan.contains("tiers")) {
    r.error = QObject::tr("The plan is missing 'fits' or 'tiers'.");
    return r;
  }
  r.ok = true;
  r.fits = plan["fits"].toBool();
  r.reason = plan["reason"].toString();
  const QJsonObject tiers = plan["tiers"].toObject();
  for (const auto& [key, label] :
       {std::pair{"hbm", "HBM"}, std::pair{"dram", "DRAM"}, std::pair{"ssd", "SSD"}}) {
    const QJsonObject t = tiers[key].toObject();
    r.tiers.push_back({label, t["needed_bytes"].toDouble(), t["free_bytes"].toDouble(),
                       t["total_bytes"].toDouble()});
  }
  const QJsonObject step = plan["step"].toObject();
  r.stepSeconds = step["step_s"].toDouble();
  r.tokensPerSecond = step["tokens_per_s"].toDouble();
  r.etaSeconds = step["eta_s"].toDouble();
  r.bottleneck = step["bottleneck"].toString();
  if (plan.contains("suggestion"))
    r.suggestion = BatchSuggestion::fromJson(plan["suggestion"].toObject());
  return r;
}

BatchSuggestion BatchSuggestion::fromJson(const QJsonObject& s) {
  BatchSuggestion b;
  b.present = true;
  b.fits = s["fits"].toBool();
  b.why = s["why"].toString();
  if (!b.fits) return b;
  b.microBatchSize = s["micro_batch_size"].toInt();
  b.gradAccum = s["grad_accum"].toInt();
  b.tokensPerStep = s["tokens_per_step"].toDouble();
  b.tokensPerSecond = s["tokens_per_s"].toDouble();
  b.stepSeconds = s["step_s"].toDouble();
  b.modelTflops = s["model_tflops"].toDouble();
  b.sameAsJob = s["same_as_job"].toBool();
  b.fits = b.microBatchSize > 0 && b.gradAccum > 0;
  return b;
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
  const QJsonDocument doc = QJsonDocument::fromJson(out.trimmed().split('\n').last());
  if (doc.isObject() && doc.object().contains("fits")) return fromJson(doc.object());
  if (doc.isObject() && doc.object().contains("versus_plan")) {  // plan --measure
    PlanResult r = fromJson(doc.object()["plan"].toObject());
    r.measuredSteps = doc.object()["steps"].toInt();
    const QJsonObject v = doc.object()["versus_plan"].toObject();
    using Unit = MeasuredFigure::Unit;
    const std::tuple<const char*, const char*, Unit> rows[] = {
        {"step_s", QT_TR_NOOP("Step time"), Unit::Seconds},
        {"tokens_per_s", QT_TR_NOOP("Tokens/s"), Unit::PerSecond},
        {"peak_hbm_bytes", QT_TR_NOOP("Peak HBM"), Unit::Bytes},
        {"peak_dram_bytes", QT_TR_NOOP("Peak DRAM"), Unit::Bytes},
        {"h2d_bytes", QT_TR_NOOP("H2D per step"), Unit::BytesPerStep},
        {"d2h_bytes", QT_TR_NOOP("D2H per step"), Unit::BytesPerStep}};
    // null (or anything not a number) is absent, never 0.
    auto number = [](const QJsonValue& x) { return x.isDouble() ? x.toDouble() : qQNaN(); };
    const QJsonObject step = v["step_s"].toObject();
    for (const auto& [key, name, unit] : rows) {
      const QJsonObject f = v[key].toObject();
      MeasuredFigure m;
      m.key = key;
      m.name = QObject::tr(name);
      m.unit = unit;
      m.predicted = number(f["predicted"]);
      m.measured = number(f["measured"]);
      m.ratio = number(f["ratio"]);
      if (unit == Unit::BytesPerStep) {
        m.predictedStepSeconds = number(step["predicted"]);
        m.measuredStepSeconds = number(step["measured"]);
      }
      r.measured << m;
    }
    return r;
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

QString PlanResult::summary() const {
  if (!ok) return error;
  return QObject::tr("step %1 · %2 tokens/s · ETA %3 · bottleneck %4")
      .arg(formatDuration(stepSeconds), QLocale().toString(tokensPerSecond, 'f', 0),
           formatDuration(etaSeconds), bottleneck);
}

}  // namespace spillway::ui

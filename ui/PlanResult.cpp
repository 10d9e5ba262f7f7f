#include "PlanResult.h"

#include <QJsonDocument>
#include <QLocale>
#include <QObject>

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
  if (plan.contains("suggestion")) r.suggestion = BatchSuggestion::fromJson(plan["suggestion"].toObject());
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
  const QString perStep = tokens % 1024 == 0 ? QString("%1K").arg(tokens / 1024) : QLocale().toString(tokens);
  return QObject::tr("Suggested: micro-batch %1 × %2 accumulation = %3 tokens/step, %4 tokens/s predicted%5 — %6")
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
    const QJsonObject v = doc.object()["versus_plan"].toObject();
    struct Row {
      const char* key;
      const char* name;
      bool bytes;
    };
    const Row rows[] = {{"step_s", "step", false},          {"peak_hbm_bytes", "peak HBM", true},
                        {"peak_dram_bytes", "peak DRAM", true}, {"h2d_bytes", "H2D per step", true},
                        {"d2h_bytes", "D2H per step", true}};
    for (const Row& row : rows) {
      const QJsonObject f = v[row.key].toObject();
      if (!f["measured"].isDouble()) continue;
      auto text = [&](double x) { return row.bytes ? formatBytes(x) : formatDuration(x); };
      r.measured << QObject::tr("%1 %2 measured · %3 planned%4")
                        .arg(QObject::tr(row.name), text(f["measured"].toDouble()),
                             f["predicted"].isDouble() ? text(f["predicted"].toDouble()) : QStringLiteral("—"),
                             f["ratio"].isDouble() ? QStringLiteral(" (%1×)").arg(f["ratio"].toDouble(), 0, 'f', 2)
                                                   : QString());
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

QString PlanResult::summary() const {
  if (!ok) return error;
  return QObject::tr("step %1 · %2 tokens/s · ETA %3 · bottleneck %4")
      .arg(formatDuration(stepSeconds), QLocale().toString(tokensPerSecond, 'f', 0),
           formatDuration(etaSeconds), bottleneck);
}

}  // namespace spillway::ui

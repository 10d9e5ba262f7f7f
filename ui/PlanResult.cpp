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
  return r;
}

PlanResult PlanResult::fromWorkerOutput(const QByteArray& out, const QByteArray& err,
                                        int exitCode) {
  const QJsonDocument doc = QJsonDocument::fromJson(out.trimmed().split('\n').last());
  if (doc.isObject() && doc.object().contains("fits")) return fromJson(doc.object());
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

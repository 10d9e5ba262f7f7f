#include "RunSeries.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <algorithm>
#include <cmath>
#include <limits>

namespace spillway::ui {

void Ring::append(double px, double py) {
  if (x.size() >= cap) {
    const int drop = cap / 4;
    x.remove(0, drop);
    y.remove(0, drop);
  }
  x.append(px);
  y.append(py);
}

double Ring::lastY() const {
  for (qsizetype i = y.size() - 1; i >= 0; --i)
    if (!std::isnan(y[i])) return y[i];
  return 0;
}

void Ring::truncateFrom(double from) {
  qsizetype keep = x.size();
  while (keep > 0 && (x[keep - 1] >= from || std::isnan(x[keep - 1]))) --keep;
  x.resize(keep);
  y.resize(keep);
}

void Ring::breakLine(double px) {
  if (isEmpty() || std::isnan(y.last())) return;
  append(px, std::numeric_limits<double>::quiet_NaN());
}

namespace {
// Samples come about 10 times a second; a gap of this many seconds (or five sample intervals)
// means the worker was paused or stalled.
constexpr double kSampleGapSeconds = 2.0;
constexpr int kMaxSpans = 4000;
constexpr int kMaxLog = 2000;
const char* kCategories[] = {"weights",   "gradients",   "master",
                             "optimizer", "checkpoints", "workspace"};

// A count of events.jsonl (a step, tokens, total steps) as a whole number. A damaged file can hold
// NaN, a negative value or 7.8e95, whose conversion to qint64 is undefined (UBSan, fuzz target
// events): those read as 0 or as the largest count a double holds exactly.
qint64 countOf(double v) {
  constexpr double kLargest = 9007199254740992.0;  // 2^53
  if (!(v > 0)) return 0;
  return static_cast<qint64>(std::min(v, kLargest));
}
}  // namespace

void RunSeries::appendLog(const QString& line) {
  if (log.size() >= kMaxLog) log.erase(log.begin(), log.begin() + kMaxLog / 4);
  log << line;
  ++logTotal;
}

bool RunSeries::apply(const QByteArray& line) {
  const QJsonDocument doc = QJsonDocument::fromJson(line);
  if (!doc.isObject()) return false;
  const QJsonObject e = doc.object();
  const QString type = e["type"].toString();
  if (type.isEmpty()) return false;
  ++lines;
  const double t = e["t"].toDouble();
  lastT = std::max(lastT, t);
  if (type == "step") {
    const double step = e["step"].toDouble();
    if (!loss.isEmpty() && step <= loss.x.last()) {
      for (Ring* r : {&loss, &lr, &tokensPerSecond, &tflops, &stepSeconds, &tokensAtStep,
                      &timeAtStep, &evalLoss})
        r->truncateFrom(step);
    }
    lastStep = countOf(step);
    tokens = countOf(e["tokens"].toDouble());
    if (e.contains("total_steps")) totalSteps = countOf(e["total_steps"].toDouble());
    loss.append(step, e["loss"].toDouble());
    lr.append(step, e["lr"].toDouble());
    tokensPerSecond.append(step, e["tokens_per_s"].toDouble());
    tflops.append(step, e["model_tflops"].toDouble());
    stepSeconds.append(step, e["step_s"].toDouble());
    tokensAtStep.append(step, e["tokens"].toDouble());
    timeAtStep.append(step, t);
  } else if (type == "eval") {
    evalLoss.append(e["step"].toDouble(), e["loss"].toDouble());
  } else if (type == "sample") {
    const double interval = e["interval_s"].toDouble();
    if (lastSampleT >= 0 && t - lastSampleT > std::max(kSampleGapSeconds, 5 * interval)) {
      const double at = lastSampleT + 1e-3;
      for (Ring& r : linkGbps) r.breakLine(at);
      for (Ring& r : pcieGbps) r.breakLine(at);
      gpuUtilPct.breakLine(at);
    }
    lastSampleT = t;
    const QJsonObject tiers = e["tiers"].toObject();
    for (const QString& tier :
         {QStringLiteral("hbm"), QStringLiteral("dram"), QStringLiteral("ssd")}) {
      const QJsonObject o = tiers[tier].toObject();
      if (o.isEmpty()) continue;
      for (const char* c : kCategories) {
        const QString key = QString(c) + "_bytes";
        if (o.contains(key)) tierBytes[tier][c].append(t, o[key].toDouble());
      }
      double cap = o["capacity_bytes"].toDouble();
      if (cap <= 0 && tier == "dram") cap = o["total_bytes"].toDouble();
      if (cap <= 0 && tier == "ssd") cap = o["total_bytes"].toDouble();
      if (cap > 0) tierCapacity[tier] = cap;
    }
    if (e.contains("gpu_mem_used_bytes"))
      tierMeasuredBytes["hbm"].append(t, e["gpu_mem_used_bytes"].toDouble());
    if (tierCapacity.value("hbm", 0) <= 0 && e["gpu_mem_total_bytes"].toDouble() > 0)
      tierCapacity["hbm"] = e["gpu_mem_total_bytes"].toDouble();
    const QJsonObject links = e["links"].toObject();
    for (const QString& l : {QStringLiteral("h2d"), QStringLiteral("d2h"),
                             QStringLiteral("ssd_read"), QStringLiteral("ssd_write")}) {
      const QString key = l + "_gbps";
      if (links.contains(key)) linkGbps[l].append(t, links[key].toDouble());
    }
    if (e.contains("pcie_rx_gbps")) pcieGbps["rx"].append(t, e["pcie_rx_gbps"].toDouble());
    if (e.contains("pcie_tx_gbps")) pcieGbps["tx"].append(t, e["pcie_tx_gbps"].toDouble());
    if (e.contains("gpu_util_pct")) gpuUtilPct.append(t, e["gpu_util_pct"].toDouble());
    if (e.contains("gpu_power_w")) gpuPowerW.append(t, e["gpu_power_w"].toDouble());
    if (e.contains("gpu_temp_c")) gpuTempC.append(t, e["gpu_temp_c"].toDouble());
  } else if (type == "span") {
    Span s;
    s.layer = e["layer"].isNull() ? -1 : e["layer"].toInt();
    s.block = e["block"].toString();
    s.phase = e["phase"].toString();
    s.start = e["start_s"].toDouble();
    s.end = e["end_s"].toDouble();
    if (spans.size() >= kMaxSpans) spans.remove(0, kMaxSpans / 4);
    spans.append(s);
  } else if (type == "state") {
    state = e["state"].toString();
    if (e.contains("run_id")) runId = e["run_id"].toString();
    if (e.contains("total_steps")) totalSteps = countOf(e["total_steps"].toDouble());
  } else if (type == "log" || type == "error") {
    if (type == "error") lastError = e["message"].toString();
    const QString text =
        type == "log" ? e["message"].toString() : "error: " + e["message"].toString();
    appendLog(QString("[%1 s] %2").arg(t, 0, 'f', 1).arg(text));
  } else if (type == "plan") {
    plan = e;
  }
  return true;
}

}  // namespace spillway::ui

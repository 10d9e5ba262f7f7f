#include "RunSeries.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <string_view>

#include "events/events.h"
#include "job/device-selection.h"

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
// The tiers, categories and links the charts draw (a sample may carry others: not drawn).
const QStringList kTiers = {"hbm", "dram", "ssd"};
const QStringList kCategories = {"weights",   "gradients",   "master",
                                 "optimizer", "checkpoints", "workspace"};
const QStringList kLinks = {"h2d", "d2h", "ssd_read", "ssd_write"};

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
  const std::optional<EventLine> e =
      parse_event_line(std::string_view(line.constData(), line.size()));
  if (!e) return false;
  ++lines;
  const double t = e->t;
  lastT = std::max(lastT, t);
  if (!e->type) return true;
  switch (*e->type) {
    case EventType::kStep: {
      const StepEvent s = step_event_from_json(e->fields);
      const double step = static_cast<double>(s.step);
      if (!loss.isEmpty() && step <= loss.x.last()) {
        for (Ring* r : {&loss, &lr, &tokensPerSecond, &tflops, &stepSeconds, &tokensAtStep,
                        &timeAtStep, &evalLoss})
          r->truncateFrom(step);
      }
      lastStep = countOf(step);
      tokens = countOf(static_cast<double>(s.tokens));
      if (s.total_steps) totalSteps = countOf(static_cast<double>(*s.total_steps));
      loss.append(step, s.loss);
      lr.append(step, s.lr);
      tokensPerSecond.append(step, s.tokens_per_s);
      tflops.append(step, s.model_tflops);
      stepSeconds.append(step, s.step_s);
      tokensAtStep.append(step, static_cast<double>(s.tokens));
      timeAtStep.append(step, t);
      break;
    }
    case EventType::kEval: {
      const EvalEvent v = eval_event_from_json(e->fields);
      evalLoss.append(static_cast<double>(v.step), v.loss);
      break;
    }
    case EventType::kSample:
      applySample(sample_event_from_json(e->fields), t);
      break;
    case EventType::kSpan: {
      const SpanEvent sp = span_event_from_json(e->fields);
      Span s;
      s.layer = sp.layer.value_or(-1);
      s.block = QString::fromStdString(sp.block);
      s.phase = QString::fromStdString(sp.phase);
      s.start = sp.start_s;
      s.end = sp.end_s;
      if (sp.device) {
        s.device = *sp.device;
        const auto at = std::lower_bound(spanDevices.begin(), spanDevices.end(), s.device);
        if (at == spanDevices.end() || *at != s.device) spanDevices.insert(at, s.device);
      }
      // Each GPU of a data-parallel run adds a step's block spans: the bound holds as many steps
      // (up to a machine's 16 GPUs; a damaged file may name any number).
      const int bound = kMaxSpans * std::clamp<int>(spanDevices.size(), 1, 16);
      if (spans.size() >= bound) spans.remove(0, bound / 4);
      spans.append(s);
      break;
    }
    case EventType::kState: {
      const StateEvent s = state_event_from_json(e->fields);
      state = QString::fromStdString(s.state);
      if (s.run_id) runId = QString::fromStdString(*s.run_id);
      if (s.total_steps) totalSteps = countOf(static_cast<double>(*s.total_steps));
      break;
    }
    case EventType::kLog:
      appendLog(QString("[%1 s] %2")
                    .arg(t, 0, 'f', 1)
                    .arg(QString::fromStdString(log_event_from_json(e->fields).message)));
      break;
    case EventType::kError:
      lastError = QString::fromStdString(error_event_from_json(e->fields).message);
      appendLog(QString("[%1 s] %2").arg(t, 0, 'f', 1).arg("error: " + lastError));
      break;
    case EventType::kPlan:
      if (auto p = plan_from_json(e->fields, /*whole=*/false); p.ok()) plan = std::move(*p);
      break;
    default:
      break;
  }
  return true;
}

void RunSeries::applyDeviceCategories(const SampleTier& o, double t) {
  auto bytes = [&](const char* category) -> std::optional<double> {
    const auto it = o.category_bytes.find(category);
    if (it == o.category_bytes.end()) return std::nullopt;
    return static_cast<double>(it->second);
  };
  // The HBM state tier (train/hbm-state.h) reserves per block a master, a gradient, m and v of
  // [numel] fp32 each under kMaster, kGradients and kOptimizer; the device holds no other master
  // or optimizer bytes. So its gradients are as many bytes as its master, and the rest of the
  // device's gradients are the streaming engine's gradient buffers.
  const std::optional<double> master = bytes("master"), optimizer = bytes("optimizer"),
                              gradients = bytes("gradients");
  double stateGradients = 0;
  if (master || optimizer) {
    stateGradients = std::min(master.value_or(0), gradients.value_or(0));
    tierBytes["hbm"]["state"].append(t,
                                     master.value_or(0) + optimizer.value_or(0) + stateGradients);
  }
  if (gradients) tierBytes["hbm"]["gradients"].append(t, *gradients - stateGradients);
  for (const char* c : {"weights", "checkpoints", "activations", "workspace"})
    if (const std::optional<double> v = bytes(c)) tierBytes["hbm"][c].append(t, *v);
}

void RunSeries::applySample(const SampleEvent& e, double t) {
  const double interval = e.interval_s.value_or(0);
  if (lastSampleT >= 0 && t - lastSampleT > std::max(kSampleGapSeconds, 5 * interval)) {
    const double at = lastSampleT + 1e-3;
    for (Ring& r : linkGbps) r.breakLine(at);
    for (Ring& r : pcieGbps) r.breakLine(at);
    gpuUtilPct.breakLine(at);
    for (Ring& r : gpuBusyPct) r.breakLine(at);
  }
  lastSampleT = t;
  for (const auto& [name, o] : e.tiers) {
    const QString tier = QString::fromStdString(name);
    if (!kTiers.contains(tier)) continue;
    if (tier == "hbm") {
      applyDeviceCategories(o, t);
    } else {
      for (const auto& [category, bytes] : o.category_bytes) {
        const QString c = QString::fromStdString(category);
        if (kCategories.contains(c)) tierBytes[tier][c].append(t, static_cast<double>(bytes));
      }
    }
    double cap = static_cast<double>(o.capacity_bytes.value_or(0));
    if (cap <= 0 && tier != "hbm") cap = static_cast<double>(o.total_bytes.value_or(0));
    if (cap > 0) tierCapacity[tier] = cap;
  }
  if (e.gpu_mem_used_bytes)
    tierMeasuredBytes["hbm"].append(t, static_cast<double>(*e.gpu_mem_used_bytes));
  if (tierCapacity.value("hbm", 0) <= 0 && e.gpu_mem_total_bytes.value_or(0) > 0)
    tierCapacity["hbm"] = static_cast<double>(*e.gpu_mem_total_bytes);
  for (const auto& [name, link] : e.links) {
    const QString l = QString::fromStdString(name);
    if (kLinks.contains(l) && link.gbps) linkGbps[l].append(t, *link.gbps);
  }
  if (e.pcie_rx_gbps) pcieGbps["rx"].append(t, *e.pcie_rx_gbps);
  if (e.pcie_tx_gbps) pcieGbps["tx"].append(t, *e.pcie_tx_gbps);
  if (e.gpu_util_pct) gpuUtilPct.append(t, *e.gpu_util_pct);
  if (e.gpu_power_w) gpuPowerW.append(t, *e.gpu_power_w);
  if (e.gpu_temp_c) gpuTempC.append(t, *e.gpu_temp_c);
  for (const SampleGpu& g : e.gpus) {
    // No run has more GPUs than a job may name: a damaged line's other indices are not drawn (each
    // would be a line of its own).
    if (g.index >= job::kMaxDevices) continue;
    if (g.hbm_used_bytes) gpuHbmBytes[g.index].append(t, static_cast<double>(*g.hbm_used_bytes));
    if (g.util_percent) gpuBusyPct[g.index].append(t, *g.util_percent);
  }
}

}  // namespace spillway::ui

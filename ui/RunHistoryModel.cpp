#include "RunHistoryModel.h"

#include <QDateTime>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <utility>

#include "Format.h"
#include "PoolTask.h"
#include "RunEditQueue.h"
#include "core/json-depth.h"
#include "events/events.h"
#include "history/run-folder.h"

namespace spillway::ui {

RunHistoryModel::RunHistoryModel(QObject* parent)
    : QAbstractTableModel(parent), edits_(new RunEditQueue(this)) {
  connect(edits_, &RunEditQueue::written, this, &RunHistoryModel::refresh);
}

namespace {

// A JSON text of runs.db (a sample, a run's figures) as the events' from_json reads it; a damaged
// one (or one nested deeper than kMaxJsonDepth) reads as null, which reads as every field absent.
nlohmann::json parsed(const std::string& text) {
  if (json_nesting_depth(text) > kMaxJsonDepth) return nullptr;
  return nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
}

}  // namespace

std::optional<Plan> RunHistoryModel::runPlan(RunStore& store, const RunInfo& run) {
  if (auto events = store.events(run.id, event_type_name(EventType::kPlan));
      events.ok() && !events->empty()) {
    if (Result<Plan> plan = plan_from_json(parsed(events->back().json), /*whole=*/false); plan.ok())
      return std::move(*plan);
  }
  if (run.run_dir.empty()) return std::nullopt;
  std::ifstream in(std::filesystem::path(run.run_dir) / "events.jsonl", std::ios::binary);
  std::string line;
  qint64 read = 0;
  while (read < kPlanScanBytes && std::getline(in, line)) {
    read += static_cast<qint64>(line.size()) + 1;
    if (line.find("\"plan\"") == std::string::npos) continue;  // most lines: not parsed
    const std::optional<EventLine> e = parse_event_line(line);
    if (!e || e->type != EventType::kPlan) continue;
    if (Result<Plan> plan = plan_from_json(e->fields, /*whole=*/false); plan.ok())
      return std::move(*plan);
  }
  return std::nullopt;
}

bool RunHistoryModel::ranOnCpu(const RunInfo& run) {
  const nlohmann::json software = parsed(run.software_json);
  return software.is_object() && software.value("backend", nlohmann::json()) == "cpu";
}

// A read's reconcile then leaves the marking to the next read; an edit (RunEditQueue, on a pool
// thread) that finds the lock held is tried again later.
RunStoreOptions RunHistoryModel::connectionOptions() {
  RunStoreOptions options;
  options.reconcile_on_open = false;
  options.busy_timeout_ms = 1000;
  return options;
}

QString RunHistoryModel::open(const QString& dbPath) {
  std::string path = dbPath.toStdString();
  if (path.empty()) {
    auto d = RunStore::default_db_path();
    if (!d.ok()) return QString::fromStdString(d.status().message());
    path = *d;
  }
  auto s = RunStore::open(path, connectionOptions());
  if (!s.ok()) return QString::fromStdString(s.status().message());
  store_ = std::move(*s);
  path_ = path;
  edits_->setDatabase(path);
  ++generation_;  // a read of the old store still running is dropped, and this one follows it
  refresh();
  return {};
}

void RunHistoryModel::refresh() {
  if (!store_) return;
  if (loading_) {
    again_ = true;
    return;
  }
  loading_ = true;
  // The read has a connection of its own: RunStore serialises the calls on one connection, so a
  // reconcile waiting for a worker's lock there would hold up the GUI's own calls (reattach,
  // edits).
  runOnPool(
      this,
      [path = path_, figures = figures_, generation = generation_] {
        auto store = RunStore::open(path, connectionOptions());
        return std::make_pair(generation, store.ok() ? load(**store, figures) : Loaded{});
      },
      [this](std::pair<quint64, Loaded> result) {
        loading_ = false;
        if (result.first == generation_ && result.second.ok) {
          beginResetModel();
          rows_ = std::move(result.second.rows);
          figures_ = std::move(result.second.figures);
          endResetModel();
        }
        if (std::exchange(again_, false)) {
          refresh();  // asked again while reading, or open() changed the store
        } else {
          emit refreshed();
        }
      });
}

RunHistoryModel::Loaded RunHistoryModel::load(RunStore& store, FigureCache figures) {
  Loaded out;
  (void)store.reconcile();
  auto runs = store.list_runs();
  if (!runs.ok()) return out;
  out.ok = true;
  for (RunInfo& info : *runs) {
    // A killed writer's unfinished checkpoint (step-N.tmp-<pid>) can be as big as a checkpoint:
    // removed here, on the pool thread, when no worker holds the run's folder.
    if (info.status != RunStatus::kRunning && !info.run_dir.empty())
      remove_unfinished_checkpoints_if_idle(info.run_dir);
    RunRow r;
    const double end =
        info.ended_at
            ? *info.ended_at
            : (info.status == RunStatus::kRunning ? QDateTime::currentSecsSinceEpoch() : -1);
    if (info.started_at && end > 0) r.durationSeconds = end - *info.started_at;
    const QString key = QString("%1/%2/%3/%4")
                            .arg(QString::fromStdString(info.id))
                            .arg(static_cast<int>(info.status))
                            .arg(info.ended_at.value_or(-1))
                            .arg(info.final_step.value_or(-1));
    const bool finished = info.status != RunStatus::kRunning;
    if (auto it = figures.find(key); finished && it != figures.end()) {
      r.meanTokensPerSecond = it->meanTokensPerSecond;
      r.tokens = it->tokens;
      r.peakHbm = it->peakHbm, r.peakDram = it->peakDram, r.peakSsd = it->peakSsd;
      r.evalLoss = it->evalLoss, r.evalStep = it->evalStep;
      r.state = it->state;
      r.devices = it->devices;
    } else {
      if (std::optional<Plan> plan = runPlan(store, info)) {
        r.state = StatePlacement::fromPlan(*plan);
        r.devices = DeviceUse::fromPlan(*plan);
      }
      if (auto evals = store.evals(info.id); evals.ok()) {
        for (const EvalRow& e : *evals) {  // in step order: the last one with a loss
          if (e.loss) r.evalLoss = e.loss, r.evalStep = e.step;
        }
      }
      if (auto m = store.metrics(info.id); m.ok() && !m->empty()) {
        double sum = 0;
        int n = 0;
        for (const MetricRow& row : *m) {
          if (row.tokens_per_s) sum += *row.tokens_per_s, ++n;
        }
        if (n) r.meanTokensPerSecond = sum / n;
        r.tokens = static_cast<double>(m->back().tokens.value_or(0));
      }
      if (auto samples = store.samples(info.id); samples.ok()) {
        for (const SampleRow& s : *samples) {
          const SampleEvent sample = sample_event_from_json(parsed(s.json));
          auto used = [&](const char* tier) {
            const auto it = sample.tiers.find(tier);
            return it == sample.tiers.end() || !it->second.used_bytes
                       ? -1.0
                       : static_cast<double>(*it->second.used_bytes);
          };
          r.peakHbm = std::max(r.peakHbm, used("hbm"));
          r.peakDram = std::max(r.peakDram, used("dram"));
          r.peakSsd = std::max(r.peakSsd, used("ssd"));
        }
      }
      if (finished) figures.insert(key, r);
    }
    if (info.tokens) r.tokens = static_cast<double>(*info.tokens);
    if (info.status == RunStatus::kFailed || info.status == RunStatus::kInterrupted) {
      r.failure = QString::fromStdString(info.error_message).trimmed();
      if (r.failure.isEmpty()) {
        if (auto errors = store.events(info.id, "error"); errors.ok() && !errors->empty())
          r.failure =
              QString::fromStdString(error_event_from_json(parsed(errors->back().json)).message)
                  .trimmed();
      }
    }
    r.info = std::move(info);
    out.rows.push_back(std::move(r));
  }
  out.figures = std::move(figures);
  return out;
}

int RunHistoryModel::rowCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : rows_.size();
}
int RunHistoryModel::columnCount(const QModelIndex& parent) const {
  return parent.isValid() ? 0 : kColumnCount;
}

int RunHistoryModel::rowOfRun(const QString& id) const {
  for (int i = 0; i < rows_.size(); ++i) {
    if (QString::fromStdString(rows_[i].info.id) == id) return i;
  }
  return -1;
}

namespace {

// A run's predicted or measured figures (runs.db, RunInfo::predicted_json / measured_json).
StepFigures figures(const std::string& json) {
  return step_figures_from_json(parsed(json));
}

// Every figure the plan predicted and the run measured (run-figures.h), with their ratio.
QString figuresTooltip(const RunInfo& i) {
  const nlohmann::json measured = parsed(i.measured_json);
  if (!measured.is_object() || measured.empty())
    return QObject::tr("Not measured: the run has not finished a step.");
  const StepFigures p = figures(i.predicted_json), m = step_figures_from_json(measured);
  struct Row {
    StepFigure figure;
    const char* name;
    bool bytes;
  };
  const Row rows[] = {
      {StepFigure::kStepS, "Step", false},
      {StepFigure::kTokensPerS, "Tokens/s", false},
      {StepFigure::kPeakHbmBytes,
       RunHistoryModel::ranOnCpu(i) ? "Peak arena (CPU, in DRAM)" : "Peak HBM", true},
      {StepFigure::kPeakDramBytes, "Peak DRAM", true},
      {StepFigure::kH2dBytes, "H2D per step", true},
      {StepFigure::kD2hBytes, "D2H per step", true}};
  QStringList lines{QObject::tr("Predicted by the plan → measured (measured / predicted)")};
  for (const Row& r : rows) {
    const double pv = figure_value(p, r.figure).value_or(-1),
                 mv = figure_value(m, r.figure).value_or(-1);
    if (mv < 0) continue;
    auto text = [&](double v) {
      if (v < 0) return QStringLiteral("—");
      if (r.bytes) return formatBytes(v);
      return r.figure == StepFigure::kStepS ? formatDuration(v) : QString::number(v, 'f', 0);
    };
    lines << QStringLiteral("%1: %2 → %3%4")
                 .arg(QObject::tr(r.name), text(pv), text(mv),
                      pv > 0 ? QStringLiteral(" (%1)").arg(mv / pv, 0, 'f', 2) : QString());
  }
  return lines.join('\n');
}

// "HBM state: 18 of 34 blocks (4.30 GB)" and the planner's why.
QString hbmStateToolTip(const StatePlacement& s) {
  if (s.blocks <= 0) return QObject::tr("No plan found for this run (runs.db, events.jsonl)");
  QString text = s.text();
  if (s.hbmBytes > 0) text += QObject::tr(" (%1)").arg(formatBytes(s.hbmBytes));
  if (!s.why.isEmpty()) text += "\n" + s.why;
  return text;
}

}  // namespace

QVariant RunHistoryModel::headerData(int section, Qt::Orientation o, int role) const {
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == kPeakHbm)
    return tr("The compute device's peak: HBM on a GPU; on the CPU backend its arena in DRAM");
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == kHbmState)
    return tr(
        "How many blocks (embedding, layers, head) kept their fp32 master weights, gradients and "
        "AdamW moments in the GPU's memory, as the run's plan placed them");
  if (o == Qt::Horizontal && role == Qt::ToolTipRole && section == kDevices)
    return tr("How many GPUs the run trained on, and which (CUDA indices), from its plan");
  if (o != Qt::Horizontal || role != Qt::DisplayRole) return {};
  static const char* names[] = {
      "Name",      "Run",          "Model",         "Dataset",
      "Status",    "Why it ended", "Started",       "Duration",
      "Tokens",    "Final loss",   "Eval loss",     "Peak device",
      "Peak DRAM", "Peak SSD",     "Mean tokens/s", "Step (plan → measured)",
      "HBM state", "GPUs",         "Tags",          "Notes"};
  return tr(names[section]);
}

QVariant RunHistoryModel::data(const QModelIndex& index, int role) const {
  if (!index.isValid() || index.row() >= rows_.size()) return {};
  const RunRow& r = rows_[index.row()];
  const RunInfo& i = r.info;
  // Sorting uses the raw value (Qt::UserRole); the table shows the formatted one.
  const bool raw = role == Qt::UserRole;
  if (role != Qt::DisplayRole && !raw) {
    if (role == Qt::ToolTipRole && index.column() == kName)
      return QString::fromStdString(i.id + "\n" + i.run_dir) +
             (r.state.blocks > 0 ? "\n" + r.state.text() : QString()) +
             QString::fromStdString(i.notes.empty() ? "" : "\n" + i.notes);
    if (role == Qt::ToolTipRole && index.column() == kHbmState) return hbmStateToolTip(r.state);
    if (role == Qt::ToolTipRole && (index.column() == kStatus || index.column() == kFailure) &&
        !r.failure.isEmpty())
      return r.failure;
    if (role == Qt::ToolTipRole && index.column() == kNotes && !i.notes.empty())
      return QString::fromStdString(i.notes);
    if (role == Qt::ToolTipRole && index.column() == kStepTime) return figuresTooltip(i);
    if (role == Qt::ToolTipRole && index.column() == kEvalLoss)
      return r.evalLoss ? tr("The last evaluation, at step %1").arg(r.evalStep)
                        : tr("Not evaluated yet");
    return {};
  }
  switch (index.column()) {
    case kName:
      return QString::fromStdString(i.name);
    case kRunId:  // "20250131-142501-3fa9c2": sorts by creation time
      return QString::fromStdString(i.id);
    case kModel:
      return QString::fromStdString(i.model_name);
    case kDataset:
      return QString::fromStdString(i.dataset).section('/', -1);
    case kStatus:
      return QString(run_status_name(i.status));
    case kFailure:
      return r.failure.section('\n', 0, 0);  // the first line; all of it in the tooltip
    case kStart:
      if (raw) return i.started_at.value_or(i.created_at);
      return QDateTime::fromSecsSinceEpoch(static_cast<qint64>(i.started_at.value_or(i.created_at)))
          .toString("yyyy-MM-dd hh:mm");
    case kDuration:
      return raw ? QVariant(r.durationSeconds) : QVariant(formatDuration(r.durationSeconds));
    case kTokens:
      return raw ? QVariant(r.tokens) : QVariant(formatCount(r.tokens));
    case kFinalLoss:
      return i.final_loss
                 ? QVariant(raw ? *i.final_loss : QVariant(QString::number(*i.final_loss, 'f', 4)))
                 : QVariant(raw ? 1e30 : QVariant("—"));
    case kEvalLoss:
      return r.evalLoss
                 ? QVariant(raw ? *r.evalLoss : QVariant(QString::number(*r.evalLoss, 'f', 4)))
                 : QVariant(raw ? 1e30 : QVariant("—"));
    case kPeakHbm:
      if (raw) return r.peakHbm;
      // A CPU run has no HBM: its device is an arena in DRAM, and the cell says so.
      return ranOnCpu(i) && r.peakHbm >= 0 ? tr("%1 (CPU arena)").arg(formatBytes(r.peakHbm))
                                           : QVariant(formatBytes(r.peakHbm));
    case kPeakDram:
      return raw ? QVariant(r.peakDram) : QVariant(formatBytes(r.peakDram));
    case kPeakSsd:
      return raw ? QVariant(r.peakSsd) : QVariant(formatBytes(r.peakSsd));
    case kTokensPerSecond:
      return raw ? QVariant(r.meanTokensPerSecond)
                 : QVariant(r.meanTokensPerSecond < 0
                                ? "—"
                                : QString::number(r.meanTokensPerSecond, 'f', 0));
    case kStepTime: {
      const double predicted = figures(i.predicted_json).step_s.value_or(-1);
      const double measured = figures(i.measured_json).step_s.value_or(-1);
      if (raw) return measured;
      if (measured < 0) return QStringLiteral("—");
      return (predicted > 0 ? formatDuration(predicted) + " → " : QString()) +
             formatDuration(measured);
    }
    case kHbmState:
      if (raw) return r.state.blocks > 0 ? r.state.hbmBlocks : -1;
      return r.state.blocks > 0 ? tr("%1 of %2 blocks").arg(r.state.hbmBlocks).arg(r.state.blocks)
                                : QStringLiteral("—");
    case kDevices:
      if (raw) return r.devices.count > 0 ? r.devices.total() : -1;
      return r.devices.text();
    case kTags: {
      QStringList tags;
      for (const auto& t : i.tags) tags << QString::fromStdString(t);
      return tags.join(", ");
    }
    case kNotes:
      return QString::fromStdString(i.notes).section(
          '\n', 0, 0);  // the first line; all of it in the tooltip
  }
  return {};
}

}  // namespace spillway::ui

#include "ComparePage.h"

#include <qcustomplot.h>

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QListWidget>
#include <QMessageBox>
#include <QPainter>
#include <QPushButton>
#include <QRegularExpression>
#include <QSlider>
#include <QSplitter>
#include <QSvgGenerator>
#include <QTableWidget>
#include <QTextDocumentFragment>
#include <QTextStream>
#include <QUrl>
#include <QVBoxLayout>
#include <map>
#include <optional>
#include <set>

#include "Charts.h"
#include "ConfigDiff.h"
#include "DialogFolder.h"
#include "Format.h"
#include "PlanResult.h"
#include "PoolTask.h"
#include "RunHistoryModel.h"
#include "TierChart.h"

namespace spillway::ui {
namespace {

QString shortLabel(const RunInfo& run) {
  // Ids read "yyyyMMdd-hhmmss-xxxxxx"; the time and suffix tell apart runs of the same name.
  const QString id = QString::fromStdString(run.id);
  return QString::fromStdString(run.name) + " · " + (id.size() > 9 ? id.mid(9) : id);
}

}  // namespace

ComparePage::ComparePage(RunHistoryModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  // The picker on the left; the empty state, or the charts and the diff, on the right.
  auto* page = new QHBoxLayout(this);
  auto* pickerColumn = new QVBoxLayout;
  auto* pickerTitle = new QLabel(tr("Runs to compare"));
  pickerTitle->setStyleSheet("font-weight: bold;");
  picker_ = new QListWidget;
  picker_->setObjectName("compareRunPicker");
  picker_->setToolTip(tr("Tick two or more runs to compare them"));
  picker_->setTextElideMode(Qt::ElideMiddle);  // the whole name and id in the tooltip
  picker_->setHorizontalScrollBarPolicy(Qt::ScrollBarAlwaysOff);
  picker_->setMinimumWidth(150);
  picker_->setMaximumWidth(260);
  pickerColumn->addWidget(pickerTitle);
  pickerColumn->addWidget(picker_, 1);
  page->addLayout(pickerColumn);
  auto* right = new QVBoxLayout;
  page->addLayout(right, 1);
  empty_ = new QLabel;
  empty_->setObjectName("compareEmptyState");
  empty_->setWordWrap(true);
  empty_->setAlignment(Qt::AlignCenter);
  right->addWidget(empty_);
  charts_ = new QWidget;
  right->addWidget(charts_, 1);
  auto* layout = new QVBoxLayout(charts_);
  layout->setContentsMargins(0, 0, 0, 0);
  auto* controls = new QHBoxLayout;
  xAxis_ = new QComboBox;
  xAxis_->addItems({tr("step"), tr("tokens"), tr("wall time (s)")});
  smoothing_ = new QSlider(Qt::Horizontal);
  smoothing_->setRange(0, 99);
  smoothing_->setValue(60);
  smoothing_->setToolTip(tr("Exponential smoothing of the curves"));
  diffOnly_ = new QCheckBox(tr("Differences only"));
  diffOnly_->setChecked(true);
  auto* png = new QPushButton(tr("Export chart…"));
  auto* csv = new QPushButton(tr("Export CSV…"));
  controls->addWidget(new QLabel(tr("x axis")));
  controls->addWidget(xAxis_);
  controls->addWidget(new QLabel(tr("smoothing")));
  controls->addWidget(smoothing_, 1);
  controls->addWidget(diffOnly_);
  controls->addWidget(png);
  controls->addWidget(csv);
  layout->addLayout(controls);
  // Where the last export went (with a link to its folder), or why it failed.
  exportStatus_ = new QLabel;
  exportStatus_->setObjectName("exportStatus");
  exportStatus_->setOpenExternalLinks(true);
  exportStatus_->setTextInteractionFlags(Qt::TextBrowserInteraction);
  exportStatus_->hide();
  layout->addWidget(exportStatus_);
  auto* charts = new QHBoxLayout;
  loss_ = titledPlot(tr("Loss"), QString(), tr("loss"), 1, 180);
  speed_ = titledPlot(tr("Tokens/s"), QString(), tr("tokens/s"), 1, 180);
  memory_ = titledPlot(tr("Tier usage"), QString(), tr("GB"), 1, 180);
  charts->addWidget(loss_);
  charts->addWidget(speed_);
  charts->addWidget(memory_);
  layout->addLayout(charts, 2);
  diff_ = new QTableWidget;
  diff_->horizontalHeader()->setStretchLastSection(true);
  diff_->verticalHeader()->hide();
  diff_->setEditTriggers(QAbstractItemView::NoEditTriggers);
  layout->addWidget(diff_, 1);
  connect(model_, &QAbstractItemModel::modelReset, this, &ComparePage::fillPicker);
  connect(picker_, &QListWidget::itemChanged, this, [this](QListWidgetItem* item) {
    const QString id = item->data(Qt::UserRole).toString();
    QStringList ids = runIds_;  // in the order they were picked
    ids.removeAll(id);
    if (item->checkState() == Qt::Checked) ids << id;
    setRuns(ids);
  });
  fillPicker();
  showState();
  connect(xAxis_, &QComboBox::currentIndexChanged, this, &ComparePage::redraw);
  connect(smoothing_, &QSlider::valueChanged, this, &ComparePage::redraw);
  connect(diffOnly_, &QCheckBox::toggled, this, &ComparePage::redraw);
  connect(png, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(
        this, tr("Export chart"), DialogFolder::startFile("exports", "compare.png"),
        tr("Images (*.png *.svg)"));
    DialogFolder::remember("exports", f);
    if (f.isEmpty()) return;
    const bool ok = exportChart(f);
    showExport(
        ok,
        ok ? tr("Saved the charts of %1 to %2")
                 .arg(runIds_.size() == 1 ? tr("1 run") : tr("%1 runs").arg(runIds_.size()), f)
           : tr("Could not write the charts to %1").arg(f),
        f);
  });
  connect(csv, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(
        this, tr("Export metrics"), DialogFolder::startFile("exports", "metrics.csv"),
        tr("CSV (*.csv)"));
    DialogFolder::remember("exports", f);
    if (f.isEmpty()) return;
    int rows = 0;
    const bool ok = exportCsv(f, &rows);
    showExport(ok,
               ok ? tr("Saved %1 rows of %2 to %3")
                        .arg(rows)
                        .arg(runIds_.size() == 1 ? tr("1 run") : tr("%1 runs").arg(runIds_.size()))
                        .arg(f)
                  : tr("Could not write %1").arg(f),
               f);
  });
}

void ComparePage::showExport(bool ok, const QString& text, const QString& path) {
  if (ok) {
    exportStatus_->setText(
        QString("%1 · <a href=\"%2\">%3</a>")
            .arg(text.toHtmlEscaped(),
                 QUrl::fromLocalFile(QFileInfo(path).absolutePath()).toString(QUrl::FullyEncoded),
                 tr("open folder")));
    exportStatus_->setStyleSheet(QString());
  } else {
    exportStatus_->setText(text.toHtmlEscaped());
    exportStatus_->setStyleSheet("color: #d62728;");
    QMessageBox::warning(this, tr("Export"), text);
  }
  exportStatus_->show();
}

QString ComparePage::exportMessage() const {
  return QTextDocumentFragment::fromHtml(exportStatus_->text()).toPlainText();
}

void ComparePage::setXAxis(XAxis x) {
  xAxis_->setCurrentIndex(x);
}

void ComparePage::fillPicker() {
  const QSignalBlocker quiet(picker_);  // ticks set here are not the user's
  picker_->clear();
  for (int r = 0; r < model_->rowCount(); ++r) {
    const RunInfo& info = model_->run(r).info;
    const QString id = QString::fromStdString(info.id);
    auto* item = new QListWidgetItem(
        QStringLiteral("%1 (%2)").arg(shortLabel(info), QString(run_status_name(info.status))));
    item->setData(Qt::UserRole, id);
    item->setToolTip(QString::fromStdString(info.name) + '\n' + id);
    item->setFlags(Qt::ItemIsEnabled | Qt::ItemIsUserCheckable | Qt::ItemIsSelectable);
    item->setCheckState(runIds_.contains(id) ? Qt::Checked : Qt::Unchecked);
    picker_->addItem(item);
  }
  showState();
}

void ComparePage::showState() {
  const int runs = model_->rowCount();
  QString text;
  if (runIds_.isEmpty() && runs == 0)
    text =
        tr("No runs to compare yet. Launch one from New run; once two runs have trained, tick "
           "them here to see their loss, throughput, memory and settings side by side.");
  else if (runIds_.isEmpty())
    text =
        tr("Tick two or more runs on the left to see their loss, throughput, memory and "
           "settings side by side (or select them in History and press Compare).");
  else if (runIds_.size() == 1)
    text = tr("Tick one more run on the left to compare this one with.");
  empty_->setText(text);
  empty_->setVisible(!text.isEmpty());
  // No empty axes: the charts show once a run is picked.
  charts_->setVisible(!runIds_.isEmpty());
}

void ComparePage::setRuns(const QStringList& ids) {
  runIds_ = ids;
  {
    const QSignalBlocker quiet(picker_);
    for (int r = 0; r < picker_->count(); ++r) {
      QListWidgetItem* item = picker_->item(r);
      item->setCheckState(ids.contains(item->data(Qt::UserRole).toString()) ? Qt::Checked
                                                                            : Qt::Unchecked);
    }
  }
  showState();
  for (auto it = runs_.begin(); it != runs_.end();)
    it = ids.contains(it.key()) ? std::next(it) : runs_.erase(it);
  redraw();  // what is cached now, until the read is in
  const std::string path = model_->databasePath();
  const quint64 generation = ++generation_;  // a read still going for other runs is dropped
  loading_ = !path.empty() && !ids.isEmpty();
  if (!loading_) return void(emit loaded());
  // Every run is read again (a running one has new steps); the controls then only redraw.
  runOnPool(
      this, [path, ids, generation] { return std::make_pair(generation, load(path, ids)); },
      [this](std::pair<quint64, QHash<QString, RunData>> result) {
        if (result.first != generation_) return;  // a newer setRuns() reads its own runs
        loading_ = false;
        runsLoaded_ += static_cast<int>(result.second.size());
        runs_ = std::move(result.second);
        redraw();
        emit loaded();
      });
}

QHash<QString, ComparePage::RunData> ComparePage::load(const std::string& path,
                                                       const QStringList& ids) {
  QHash<QString, RunData> out;
  auto store = RunStore::open(path, RunHistoryModel::connectionOptions());
  if (!store.ok()) return out;
  static const char* const kTiers[] = {"hbm", "dram", "ssd"};
  for (const QString& qid : ids) {
    const std::string id = qid.toStdString();
    auto run = (*store)->get_run(id);
    if (!run.ok()) continue;
    RunData d;
    d.info = std::move(*run);
    if (auto m = (*store)->metrics(id); m.ok()) d.metrics = std::move(*m);
    if (auto e = (*store)->evals(id); e.ok()) d.evals = std::move(*e);
    if (std::optional<Plan> plan = RunHistoryModel::runPlan(**store, d.info)) {
      d.state = StatePlacement::fromPlan(*plan);
      d.devices = DeviceUse::fromPlan(*plan);
    }
    if (auto samples = (*store)->samples(id); samples.ok()) {
      d.samples.reserve(samples->size());
      for (const SampleRow& r : *samples) {
        const QJsonObject tiers =
            QJsonDocument::fromJson(QByteArray::fromStdString(r.json)).object()["tiers"].toObject();
        RunData::TierSample t;
        t.t_s = r.t_s;
        for (int k = 0; k < 3; ++k) {
          const QJsonObject o = tiers[kTiers[k]].toObject();
          if (o.contains("used_bytes")) t.used[k] = o["used_bytes"].toDouble();
        }
        d.samples.push_back(t);
      }
    }
    out.insert(qid, std::move(d));
  }
  return out;
}

namespace {

// The x of each step for the chosen axis: 0 step, 1 tokens, 2 wall time; nullopt when the row
// lacks it (a missing value is left out, never drawn as zero).
std::optional<double> xOf(const MetricRow& m, int mode) {
  if (mode == 0) return static_cast<double>(m.step);
  if (mode == 1)
    return m.tokens ? std::optional<double>(static_cast<double>(*m.tokens)) : std::nullopt;
  return m.t_s;
}

// Maps a wall time onto the chosen axis by linear interpolation over the steps' times (samples
// are taken by time, not by step), from (t 0, x 0) up to the last step; later times clamp.
double timeToX(double t, const QVector<double>& stepT, const QVector<double>& stepX) {
  double t0 = 0, x0 = 0;
  for (int i = 0; i < stepT.size(); ++i) {
    if (t <= stepT[i])
      return stepT[i] > t0 ? x0 + (stepX[i] - x0) * (t - t0) / (stepT[i] - t0) : stepX[i];
    t0 = stepT[i], x0 = stepX[i];
  }
  return x0;
}

}  // namespace

void ComparePage::redraw() {
  for (QCustomPlot* p : {loss_, speed_, memory_}) p->clearGraphs();
  const double w = smoothing_->value() / 100.0;
  const int mode = xAxis_->currentIndex();
  // planned: each run's "HBM state (plan)"; gpus: its "GPUs (plan)"
  QStringList jobs, names, planned, gpus, saved;
  struct TierCurve {
    QString label;
    QColor color;
    Qt::PenStyle style;
    QVector<double> x, bytes;
  };
  QVector<TierCurve> tierCurves;
  double maxBytes = 0;
  for (int k = 0; k < runIds_.size(); ++k) {
    const auto run = runs_.constFind(runIds_[k]);
    if (run == runs_.cend()) continue;
    jobs << QString::fromStdString(run->info.job_json);
    planned << (run->state.blocks > 0
                    ? tr("%1 of %2 blocks").arg(run->state.hbmBlocks).arg(run->state.blocks)
                    : QStringLiteral("—"));
    gpus << run->devices.text();
    saved << (run->state.blocks > 0 ? run->state.savedText() : QStringLiteral("—"));
    names << shortLabel(run->info);
    const QColor color = QColor::fromHsv((k * 67) % 360, 200, 200);
    QVector<double> lx, loss, sx, tps, stepT, stepX;
    std::map<std::int64_t, double> xOfStep;  // where each step lies on the chosen axis
    for (const MetricRow& m : run->metrics) {
      const std::optional<double> x = xOf(m, mode);
      if (!x) continue;
      xOfStep[m.step] = *x;
      if (m.loss) lx << *x, loss << *m.loss;
      if (m.tokens_per_s) sx << *x, tps << *m.tokens_per_s;
      if (m.t_s) stepT << *m.t_s, stepX << *x;
    }
    auto* g = loss_->addGraph();
    g->setName(names.last());
    g->setPen(QPen(color, 2));
    g->setData(lx, smoothEma(loss, w));
    // Eval loss: the same colour, dashed, a dot on each evaluation, never smoothed. The eval
    // before the first step (step 0) lies at the axis' origin, or at its time.
    QVector<double> ex, eval;
    for (const EvalRow& e : run->evals) {
      if (!e.loss) continue;
      const auto at = xOfStep.find(e.step);
      if (at != xOfStep.end())
        ex << at->second;
      else if (mode == 2 && e.t_s)
        ex << *e.t_s;
      else if (e.step == 0)
        ex << 0.0;
      else
        continue;  // no step row to place it by
      eval << *e.loss;
    }
    if (!eval.isEmpty()) {
      auto* e = loss_->addGraph();
      e->setName(names.last() + tr(" · eval"));
      e->setPen(QPen(color, 1.5, Qt::DashLine));
      e->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssDisc, 6));
      e->setData(ex, eval);
    }
    auto* s = speed_->addGraph();
    s->setName(names.last());
    s->setPen(QPen(color, 2));
    s->setData(sx, smoothEma(tps, w));
    // Tier usage: the samples' used bytes per tier, a pen style per tier.
    const struct {
      const char* label;
      Qt::PenStyle style;
    } tiers[] = {{"HBM", Qt::DashLine}, {"DRAM", Qt::SolidLine}, {"SSD", Qt::DotLine}};
    for (int t = 0; t < 3; ++t) {  // the order of RunData::TierSample::used
      const QString tier = t == 0 ? deviceTierName(RunHistoryModel::ranOnCpu(run->info))
                                  : QString::fromLatin1(tiers[t].label);
      TierCurve c{names.last() + " " + tier, color, tiers[t].style, {}, {}};
      for (const RunData::TierSample& r : run->samples) {
        if (!r.used[t]) continue;
        c.x << (mode == 2 ? r.t_s : timeToX(r.t_s, stepT, stepX));
        c.bytes << *r.used[t];
        maxBytes = std::max(maxBytes, c.bytes.last());
      }
      if (!c.x.isEmpty()) tierCurves << c;
    }
  }
  const ByteUnit unit = byteUnitFor(maxBytes);
  for (const TierCurve& c : tierCurves) {
    auto* g = memory_->addGraph();
    g->setName(c.label);
    g->setPen(QPen(c.color, c.style == Qt::SolidLine ? 2 : 1.5, c.style));
    QVector<double> y = c.bytes;
    for (double& v : y) v /= unit.bytes;
    g->setData(c.x, y);
  }
  memory_->yAxis->setLabel(unit.name);
  for (QCustomPlot* p : {loss_, speed_, memory_}) {
    p->xAxis->setLabel(xAxis_->currentText());
    p->rescaleAxes();
    p->replot(QCustomPlot::rpQueuedReplot);
  }
  // Throughput and memory start at zero so that runs compare by height.
  for (QCustomPlot* p : {speed_, memory_}) {
    p->yAxis->setRangeLower(0);
    p->yAxis->setRangeUpper(std::max(p->yAxis->range().upper * 1.05, 1e-6));
  }
  QVector<ConfigDiffRow> rows = configDiff(jobs, diffOnly_->isChecked());
  // What the plans made of placement.hbm_state_blocks (-1 asks for as many as fit), of
  // placement.saved_activation_layers and of placement.devices, each beside its key.
  const std::pair<ConfigDiffRow, const char*> planned_rows[] = {
      {{kPlannedStateKey, planned}, "placement.hbm_state_blocks"},
      {{kPlannedSavedKey, saved}, "placement.saved_activation_layers"},
      {{kPlannedDevicesKey, gpus}, "placement.devices"}};
  for (const auto& planned_row : planned_rows) {
    ConfigDiffRow row = planned_row.first;
    const QLatin1String after(planned_row.second);
    for (const QString& v : row.values) row.differs |= v != row.values.first();
    if (diffOnly_->isChecked() && !row.differs) continue;
    const auto at = std::find_if(rows.begin(), rows.end(),
                                 [&](const ConfigDiffRow& r) { return r.key > after; });
    rows.insert(at, row);
  }
  diff_->clear();
  diff_->setColumnCount(names.size() + 1);
  diff_->setHorizontalHeaderLabels(QStringList{tr("setting")} + names);
  diff_->setRowCount(rows.size());
  for (int r = 0; r < rows.size(); ++r) {
    diff_->setItem(r, 0, new QTableWidgetItem(rows[r].key));
    for (int c = 0; c < rows[r].values.size(); ++c) {
      auto* item = new QTableWidgetItem(rows[r].values[c]);
      if (rows[r].differs) item->setBackground(QColor(255, 200, 60, 90));
      item->setToolTip(rows[r].values[c]);
      diff_->setItem(r, c + 1, item);
    }
  }
  diff_->resizeColumnsToContents();
  for (int c = 0; c < diff_->columnCount(); ++c)
    diff_->setColumnWidth(c, std::min(diff_->columnWidth(c), 420));
}

bool ComparePage::exportCsv(const QString& path, int* rowsOut) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) return false;
  QTextStream out(&f);
  // An empty field is a value the worker did not record.
  auto opt = [](const auto& v) { return v ? QString::number(*v, 'g', 10) : QString(); };
  // RFC 4180: a field with a comma, quote or line break is quoted, its quotes doubled.
  auto field = [](QString v) {
    if (!v.contains(QRegularExpression("[,\"\r\n]"))) return v;
    return '"' + v.replace('"', "\"\"") + '"';
  };
  out << "run_id,run_name,step,loss,eval_loss,lr,grad_norm,tokens,tokens_per_s,model_tflops,t_s\n";
  int rows = 0;
  for (const QString& id : runIds_) {
    const int row = model_->rowOfRun(id);
    const QString name = row >= 0 ? QString::fromStdString(model_->run(row).info.name) : QString();
    const auto run = runs_.constFind(id);
    if (run == runs_.cend()) continue;
    // Eval losses on their steps; an eval at a step without a metric row (step 0, before training)
    // gets a row of its own.
    std::map<std::int64_t, std::optional<double>> evalAt;
    for (const EvalRow& e : run->evals) evalAt[e.step] = e.loss;
    std::map<std::int64_t, const MetricRow*> byStep;
    for (const MetricRow& m : run->metrics) byStep[m.step] = &m;
    std::set<std::int64_t> steps;
    for (const auto& [step, m] : byStep) steps.insert(step);
    for (const auto& [step, loss] : evalAt) steps.insert(step);
    for (std::int64_t step : steps) {
      const MetricRow* m = byStep.count(step) ? byStep[step] : nullptr;
      const std::optional<double> eval = evalAt.count(step) ? evalAt[step] : std::nullopt;
      MetricRow none;
      const MetricRow& r = m ? *m : none;
      out << field(id) << ',' << field(name) << ',' << step << ',' << opt(r.loss) << ','
          << opt(eval) << ',' << opt(r.lr) << ',' << opt(r.grad_norm) << ',' << opt(r.tokens) << ','
          << opt(r.tokens_per_s) << ',' << opt(r.model_tflops) << ',' << opt(r.t_s) << '\n';
      ++rows;
    }
  }
  out.flush();
  if (rowsOut) *rowsOut = rows;
  return f.error() == QFile::NoError;
}

bool ComparePage::exportChart(const QString& path) const {
  // The three charts side by side, each at least 600 x 400.
  const QList<QCustomPlot*> plots = {loss_, speed_, memory_};
  const int w = std::max(loss_->width(), 600), h = std::max(loss_->height(), 400);
  if (path.endsWith(".svg", Qt::CaseInsensitive)) {
    QSvgGenerator gen;
    gen.setFileName(path);
    gen.setSize(QSize(w * plots.size(), h));
    gen.setViewBox(QRect(0, 0, w * plots.size(), h));
    gen.setTitle(tr("Spillway run comparison"));
    QCPPainter painter(&gen);
    for (int i = 0; i < plots.size(); ++i) {
      painter.save();
      painter.translate(i * w, 0);
      plots[i]->toPainter(&painter, w, h);
      painter.restore();
    }
    return painter.end();
  }
  QPixmap all(w * plots.size(), h);
  all.fill(palette().color(QPalette::Base));
  QPainter painter(&all);
  for (int i = 0; i < plots.size(); ++i) painter.drawPixmap(i * w, 0, plots[i]->toPixmap(w, h));
  painter.end();
  return all.save(path);
}

}  // namespace spillway::ui

#include "ComparePage.h"

#include <QCheckBox>
#include <QComboBox>
#include <QFile>
#include <QFileDialog>
#include <QHBoxLayout>
#include <QHeaderView>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QSlider>
#include <QSplitter>
#include <QSvgGenerator>
#include <QTableWidget>
#include <QTextStream>
#include <QVBoxLayout>
#include <qcustomplot.h>

#include "ConfigDiff.h"
#include "TierChart.h"
#include "RunHistoryModel.h"

namespace spillway::ui {
namespace {

QCustomPlot* plot(const QString& title, const QString& y) {
  auto* p = new QCustomPlot;
  p->plotLayout()->insertRow(0);
  p->plotLayout()->addElement(0, 0, new QCPTextElement(p, title, QFont(p->font().family(), 10, QFont::Bold)));
  p->yAxis->setLabel(y);
  placeLegendBelow(p, 2);
  p->setMinimumHeight(180);
  return p;
}

QVector<double> ema(const QVector<double>& y, double w) {
  QVector<double> out(y.size());
  double last = 0, debias = 0;
  for (int i = 0; i < y.size(); ++i) {
    last = last * w + (1 - w) * y[i];
    debias = debias * w + (1 - w);
    out[i] = last / debias;
  }
  return out;
}

}  // namespace

ComparePage::ComparePage(RunHistoryModel* model, QWidget* parent) : QWidget(parent), model_(model) {
  auto* layout = new QVBoxLayout(this);
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
  auto* charts = new QHBoxLayout;
  loss_ = plot(tr("Loss"), tr("loss"));
  speed_ = plot(tr("Tokens/s"), tr("tokens/s"));
  memory_ = plot(tr("Tier usage"), tr("GB"));
  charts->addWidget(loss_);
  charts->addWidget(speed_);
  charts->addWidget(memory_);
  layout->addLayout(charts, 2);
  diff_ = new QTableWidget;
  diff_->horizontalHeader()->setStretchLastSection(true);
  layout->addWidget(diff_, 1);
  connect(xAxis_, &QComboBox::currentIndexChanged, this, &ComparePage::redraw);
  connect(smoothing_, &QSlider::valueChanged, this, &ComparePage::redraw);
  connect(diffOnly_, &QCheckBox::toggled, this, &ComparePage::redraw);
  connect(png, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export chart"), "compare.png", tr("Images (*.png *.svg)"));
    if (!f.isEmpty()) exportChart(f);
  });
  connect(csv, &QPushButton::clicked, this, [this] {
    const QString f = QFileDialog::getSaveFileName(this, tr("Export metrics"), "metrics.csv", tr("CSV (*.csv)"));
    if (!f.isEmpty()) exportCsv(f);
  });
}

void ComparePage::setRuns(const QStringList& ids) {
  runIds_ = ids;
  redraw();
}

void ComparePage::redraw() {
  for (QCustomPlot* p : {loss_, speed_, memory_}) p->clearGraphs();
  RunStore* store = model_->store();
  if (!store) return;
  const double w = smoothing_->value() / 100.0;
  const int mode = xAxis_->currentIndex();
  QStringList jobs, names;
  for (int k = 0; k < runIds_.size(); ++k) {
    const std::string id = runIds_[k].toStdString();
    auto run = store->get_run(id);
    if (!run.ok()) continue;
    jobs << QString::fromStdString(run->job_json);
    names << QString::fromStdString(run->name + " (" + run->id + ")");
    const QColor color = QColor::fromHsv((k * 67) % 360, 200, 200);
    auto metrics = store->metrics(id);
    QVector<double> x, loss, tps;
    if (metrics.ok()) {
      for (const MetricRow& m : *metrics) {
        x << (mode == 0 ? m.step : mode == 1 ? static_cast<double>(m.tokens.value_or(0)) : m.t_s.value_or(0));
        loss << m.loss.value_or(0);
        tps << m.tokens_per_s.value_or(0);
      }
    }
    auto* g = loss_->addGraph();
    g->setName(names.last());
    g->setPen(QPen(color, 2));
    g->setData(x, ema(loss, w));
    auto* s = speed_->addGraph();
    s->setName(names.last());
    s->setPen(QPen(color, 2));
    s->setData(x, ema(tps, w));
    // Tier usage against wall time (samples are per second, not per step).
    auto samples = store->samples(id);
    QVector<double> t, dram, hbm;
    if (samples.ok()) {
      for (const SampleRow& r : *samples) {
        const QJsonObject tiers = QJsonDocument::fromJson(QByteArray::fromStdString(r.json)).object()["tiers"].toObject();
        t << r.t_s;
        dram << tiers["dram"].toObject()["used_bytes"].toDouble() / 1e9;
        hbm << tiers["hbm"].toObject()["used_bytes"].toDouble() / 1e9;
      }
    }
    auto* md = memory_->addGraph();
    md->setName(names.last() + " DRAM");
    md->setPen(QPen(color, 2));
    md->setData(t, dram);
    auto* mh = memory_->addGraph();
    mh->setName(names.last() + " HBM");
    mh->setPen(QPen(color, 1, Qt::DashLine));
    mh->setData(t, hbm);
  }
  for (QCustomPlot* p : {loss_, speed_}) p->xAxis->setLabel(xAxis_->currentText());
  memory_->xAxis->setLabel(tr("wall time (s)"));
  for (QCustomPlot* p : {loss_, speed_, memory_}) {
    p->rescaleAxes();
    p->replot(QCustomPlot::rpQueuedReplot);
  }
  const QVector<ConfigDiffRow> rows = configDiff(jobs, diffOnly_->isChecked());
  diff_->clear();
  diff_->setColumnCount(names.size() + 1);
  diff_->setHorizontalHeaderLabels(QStringList{tr("setting")} + names);
  diff_->setRowCount(rows.size());
  for (int r = 0; r < rows.size(); ++r) {
    diff_->setItem(r, 0, new QTableWidgetItem(rows[r].key));
    for (int c = 0; c < rows[r].values.size(); ++c) {
      auto* item = new QTableWidgetItem(rows[r].values[c]);
      if (rows[r].differs) item->setBackground(QColor(255, 224, 138, 120));
      diff_->setItem(r, c + 1, item);
    }
  }
}

bool ComparePage::exportCsv(const QString& path) const {
  QFile f(path);
  if (!f.open(QIODevice::WriteOnly | QIODevice::Text)) return false;
  QTextStream out(&f);
  out << "run_id,step,loss,lr,grad_norm,tokens,tokens_per_s,model_tflops,t_s\n";
  for (const QString& id : runIds_) {
    auto metrics = model_->store()->metrics(id.toStdString());
    if (!metrics.ok()) continue;
    for (const MetricRow& m : *metrics) {
      out << id << ',' << m.step << ',' << m.loss.value_or(0) << ',' << m.lr.value_or(0) << ',' << m.grad_norm.value_or(0) << ','
          << m.tokens.value_or(0) << ',' << m.tokens_per_s.value_or(0) << ',' << m.model_tflops.value_or(0) << ',' << m.t_s.value_or(0)
          << '\n';
    }
  }
  return true;
}

bool ComparePage::exportChart(const QString& path) const {
  if (path.endsWith(".svg", Qt::CaseInsensitive)) {
    QSvgGenerator gen;
    gen.setFileName(path);
    gen.setSize(loss_->size());
    gen.setViewBox(QRect(QPoint(0, 0), loss_->size()));
    QCPPainter painter(&gen);
    loss_->toPainter(&painter, loss_->width(), loss_->height());
    return painter.end();
  }
  return loss_->savePng(path, std::max(loss_->width(), 600), std::max(loss_->height(), 400));
}

}  // namespace spillway::ui

#include "LivePage.h"

#include <qcustomplot.h>
#include <signal.h>

#include <QFileInfo>
#include <QGridLayout>
#include <QHBoxLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSplitter>
#include <QVBoxLayout>
#include <array>
#include <limits>

#include "Charts.h"
#include "Format.h"
#include "TierChart.h"
#include "TimelineView.h"
#include "WorkerClient.h"
#include "history/run-store.h"

namespace spillway::ui {
namespace {

const char* kLinkNames[] = {"h2d", "d2h", "ssd_read", "ssd_write"};

// A series without data is hidden and leaves the legend, so an unreported metric reads as absent
// rather than as a flat zero (STYLE.md 10).
void showGraph(QCPGraph* g, bool show) {
  if (g->visible() == show) return;
  g->setVisible(show);
  if (show) {
    g->addToLegend();
  } else {
    g->removeFromLegend();
  }
}

// The host link's capacity the worker measured at start (its plan event), GB/s: {h2d, d2h}; 0 when
// not measured. A plan without a separate D2H figure measured one copy rate for both ways.
std::array<double, 2> hostLinkCapacity(const QJsonObject& plan) {
  const QJsonObject machine = plan["machine"].toObject();
  const double h2d = machine["h2d_bytes_per_s"].toDouble() / 1e9;
  const double d2h = machine["d2h_bytes_per_s"].toDouble() / 1e9;
  return {h2d, d2h > 0 ? d2h : h2d};
}

}  // namespace

LivePage::LivePage(QWidget* parent) : QWidget(parent) {
  auto* layout = new QVBoxLayout(this);
  auto* top = new QHBoxLayout;
  title_ = new QLabel(tr("No run attached. Launch one from New run, or pick one in History."));
  title_->setStyleSheet("font-weight: bold;");
  progress_ = new QProgressBar;
  progress_->setRange(0, 1000);
  status_ = new QLabel;
  pause_ = new QPushButton(tr("Pause"));
  stop_ = new QPushButton(tr("Stop"));
  checkpoint_ = new QPushButton(tr("Save checkpoint"));
  pause_->setToolTip(tr("Suspend the worker (SIGSTOP); press again to resume"));
  stop_->setToolTip(tr("Checkpoint, then stop cleanly (SIGTERM)"));
  checkpoint_->setToolTip(tr("Write a checkpoint now and keep training (SIGUSR1)"));
  top->addWidget(title_, 1);
  top->addWidget(pause_);
  top->addWidget(checkpoint_);
  top->addWidget(stop_);
  layout->addLayout(top);
  auto* prow = new QHBoxLayout;
  prow->addWidget(progress_, 1);
  prow->addWidget(status_);
  layout->addLayout(prow);

  auto* grid = new QGridLayout;
  tiers_[0] = new TierChart("hbm", tr("HBM (device)"));
  tiers_[1] = new TierChart("dram", tr("DRAM (host)"));
  tiers_[2] = new TierChart("ssd", tr("SSD"));
  links_ = titledPlot(tr("Link throughput"), tr("time (s)"), tr("GB/s"), 2, 170);
  const QList<QColor> linkColors = {QColor("#1f77b4"), QColor("#ff7f0e"), QColor("#2ca02c"),
                                    QColor("#d62728")};
  for (int i = 0; i < 4; ++i) {
    links_->addGraph()->setName(kLinkNames[i]);
    links_->graph(i)->setPen(QPen(linkColors[i], 1.5));
  }
  for (int i = 0; i < 2; ++i) {
    pcie_[i] = links_->addGraph();
    pcie_[i]->setPen(QPen(linkColors[i], 1, Qt::DotLine));
    linkCapacity_[i] = links_->addGraph();
    QColor c = linkColors[i];
    c.setAlpha(160);
    linkCapacity_[i]->setPen(QPen(c, 1, Qt::DashLine));
  }
  links_->yAxis2->setLabel(tr("GPU busy (%)"));
  gpuUtil_ = links_->addGraph(links_->xAxis, links_->yAxis2);
  gpuUtil_->setPen(QPen(QColor("#9467bd"), 1.5));
  for (QCPGraph* g : {pcie_[0], pcie_[1], linkCapacity_[0], linkCapacity_[1], gpuUtil_}) {
    g->setVisible(false);
    g->removeFromLegend();
  }
  loss_ = titledPlot(tr("Loss and learning rate"), tr("step"), tr("loss"), 2, 170);
  loss_->addGraph()->setName(tr("loss"));
  loss_->graph(0)->setPen(QPen(QColor(31, 119, 180, 70)));
  loss_->addGraph()->setName(tr("loss (smoothed)"));
  loss_->graph(1)->setPen(QPen(QColor("#1f77b4"), 2.5));
  loss_->addGraph()->setName(tr("eval loss"));
  loss_->graph(2)->setPen(QPen(QColor("#d62728"), 2));
  loss_->graph(2)->setScatterStyle(QCPScatterStyle(QCPScatterStyle::ssCircle, 6));
  loss_->graph(2)->setLineStyle(QCPGraph::lsNone);
  loss_->yAxis2->setVisible(true);
  loss_->yAxis2->setLabel(tr("learning rate"));
  loss_->addGraph(loss_->xAxis, loss_->yAxis2)->setName(tr("lr"));
  loss_->graph(3)->setPen(QPen(QColor("#2ca02c"), 1, Qt::DashLine));
  speed_ = titledPlot(tr("Throughput"), tr("step"), tr("tokens/s"), 2, 170);
  speed_->addGraph()->setName(tr("tokens/s"));
  speed_->graph(0)->setPen(QPen(QColor("#9467bd"), 1.5));
  speed_->yAxis2->setVisible(true);
  speed_->yAxis2->setLabel(tr("model TFLOPS"));
  speed_->addGraph(speed_->xAxis, speed_->yAxis2)->setName(tr("TFLOPS"));
  speed_->graph(1)->setPen(QPen(QColor("#8c564b"), 1.5));
  grid->addWidget(tiers_[0], 0, 0);
  grid->addWidget(tiers_[1], 0, 1);
  grid->addWidget(tiers_[2], 0, 2);
  grid->addWidget(links_, 1, 0);
  grid->addWidget(loss_, 1, 1);
  grid->addWidget(speed_, 1, 2);
  layout->addLayout(grid, 3);
  timeline_ = new TimelineView;
  layout->addWidget(timeline_, 1);
  log_ = new QPlainTextEdit;
  log_->setReadOnly(true);
  log_->setMaximumBlockCount(2000);
  log_->setMaximumHeight(120);
  layout->addWidget(log_);

  connect(pause_, &QPushButton::clicked, this, &LivePage::pauseOrResume);
  connect(stop_, &QPushButton::clicked, this, &LivePage::stop);
  connect(checkpoint_, &QPushButton::clicked, this, &LivePage::saveCheckpoint);
  connect(&timer_, &QTimer::timeout, this, &LivePage::tick);
  timer_.setInterval(250);
  // The folder too: events.jsonl may not exist yet, and a watched file that is replaced drops out.
  auto mark = [this] { changed_ = true; };
  connect(&watcher_, &QFileSystemWatcher::fileChanged, this, mark);
  connect(&watcher_, &QFileSystemWatcher::directoryChanged, this, mark);
}

void LivePage::attach(const QString& runDir, qint64 pid) {
  runDir_ = runDir;
  pid_ = pid;
  paused_ = WorkerClient::suspended(this->pid());  // paused before the app was restarted
  pause_->setText(paused_ ? tr("Resume") : tr("Pause"));
  series_ = RunSeries();
  tail_.reset(runDir);
  if (!watcher_.files().isEmpty()) watcher_.removePaths(watcher_.files());
  if (!watcher_.directories().isEmpty()) watcher_.removePaths(watcher_.directories());
  watcher_.addPath(runDir);
  if (QFileInfo::exists(tail_.path())) watcher_.addPath(tail_.path());
  changed_ = true;
  logShown_ = 0;
  log_->clear();
  title_->setText(runDir);
  timer_.start();
  tick();
}

QStringList LivePage::linkLegend() const {
  // The capacities the worker measured at start (its plan event): the host-device copy rates for
  // H2D and D2H, the SSD folder's rate for the SSD links when the plan carries it.
  const auto host = hostLinkCapacity(series_.plan);
  const double ssd = series_.plan["machine"].toObject()["ssd_bytes_per_s"].toDouble() / 1e9;
  const double caps[] = {host[0], host[1], ssd, ssd};
  QStringList out;
  for (int i = 0; i < 4; ++i) {
    const QString name = kLinkNames[i];
    const Ring& r = series_.linkGbps.value(name);
    if (r.isEmpty()) {
      out << tr("%1 (unavailable)").arg(name);
    } else if (caps[i] > 0) {
      out << tr("%1 %2 GB/s (%3% of %4 GB/s)")
                 .arg(name)
                 .arg(r.lastY(), 0, 'f', 2)
                 .arg(100 * r.lastY() / caps[i], 0, 'f', 0)
                 .arg(caps[i], 0, 'f', 1);
    } else {
      out << tr("%1 %2 GB/s").arg(name).arg(r.lastY(), 0, 'f', 2);
    }
  }
  return out;
}

QString LivePage::gpuLegend() const {
  const RunSeries& s = series_;
  if (s.gpuUtilPct.isEmpty()) return {};
  QString text = tr("GPU busy %1%").arg(s.gpuUtilPct.lastY(), 0, 'f', 0);
  // Power and temperature ride along when they come in the same samples (a stale figure would
  // mislead: only the latest sample's).
  if (!s.gpuPowerW.isEmpty() && s.gpuPowerW.x.last() == s.gpuUtilPct.x.last())
    text += tr(" · %1 W").arg(s.gpuPowerW.lastY(), 0, 'f', 0);
  if (!s.gpuTempC.isEmpty() && s.gpuTempC.x.last() == s.gpuUtilPct.x.last())
    text += tr(" · %1 °C").arg(s.gpuTempC.lastY(), 0, 'f', 0);
  return text;
}

bool LivePage::gpuSeriesShown() const {
  return gpuUtil_->visible();
}

bool LivePage::linkCapacityShown() const {
  return linkCapacity_[0]->visible() || linkCapacity_[1]->visible();
}

qint64 LivePage::pid() {
  if (store_ && !runDir_.isEmpty()) {
    auto runs = store_->list_runs();
    if (runs.ok()) {
      for (const RunInfo& r : *runs) {
        if (QString::fromStdString(r.run_dir) == runDir_ && r.pid) return *r.pid;
      }
    }
  }
  return pid_;
}

void LivePage::stop() {
  // A suspended worker would hold the SIGTERM until resumed: resume it so that it can stop.
  if (WorkerClient::signal(pid(), SIGTERM) && paused_) pauseOrResume();
}

void LivePage::saveCheckpoint() {
  WorkerClient::signal(pid(), SIGUSR1);
}

void LivePage::pauseOrResume() {
  if (WorkerClient::signal(pid(), paused_ ? SIGCONT : SIGSTOP)) {
    paused_ = !paused_;
    pause_->setText(paused_ ? tr("Resume") : tr("Pause"));
  }
}

int LivePage::tick() {
  if (!changed_ && ++quietTicks_ < 4) return 0;
  changed_ = false;
  quietTicks_ = 0;
  if (watcher_.files().isEmpty() && QFileInfo::exists(tail_.path())) watcher_.addPath(tail_.path());
  const int n = tail_.poll(series_);
  if (n > 0) redraw();
  const bool finished =
      series_.state == "completed" || series_.state == "stopped" || series_.state == "failed";
  pause_->setEnabled(!finished);
  stop_->setEnabled(!finished);
  checkpoint_->setEnabled(!finished);
  return n;
}

void LivePage::redraw() {
  const RunSeries& s = series_;
  for (TierChart* t : tiers_) t->update(s);
  double linkTop = 0;
  double t0 = std::numeric_limits<double>::infinity(), t1 = -t0;  // the time the links cover
  const auto cover = [&](const Ring& r) {
    for (double v : r.y) linkTop = std::max(linkTop, v);
    if (!r.isEmpty()) t0 = std::min(t0, r.x.first()), t1 = std::max(t1, r.x.last());
  };
  for (int i = 0; i < 4; ++i) {
    const Ring& r = s.linkGbps.value(kLinkNames[i]);
    links_->graph(i)->setData(r.x, r.y, true);
    cover(r);
  }
  const QStringList legend = linkLegend();
  for (int i = 0; i < 4; ++i) links_->graph(i)->setName(legend[i]);
  const char* pcieKeys[] = {"rx", "tx"};
  const QString pcieNames[] = {tr("PCIe host→GPU"), tr("PCIe GPU→host")};
  for (int i = 0; i < 2; ++i) {
    const Ring& r = s.pcieGbps.value(pcieKeys[i]);
    pcie_[i]->setData(r.x, r.y, true);
    cover(r);
    pcie_[i]->setName(tr("%1 %2 GB/s (GPU counter)").arg(pcieNames[i]).arg(r.lastY(), 0, 'f', 2));
    showGraph(pcie_[i], !r.isEmpty());
  }
  const auto host = hostLinkCapacity(s.plan);
  for (int i = 0; i < 2; ++i) {
    // One line when both ways were measured as one copy rate.
    const bool show = host[i] > 0 && t1 >= t0 && (i == 0 || host[1] != host[0]);
    if (show) {
      linkCapacity_[i]->setData({t0, t1}, {host[i], host[i]}, true);
      linkCapacity_[i]->setName(i == 0 && host[1] == host[0]
                                    ? tr("host link capacity %1 GB/s").arg(host[0], 0, 'f', 1)
                                    : tr("%1 capacity %2 GB/s").arg(kLinkNames[i]).arg(host[i], 0, 'f', 1));
      linkTop = std::max(linkTop, host[i]);
    }
    showGraph(linkCapacity_[i], show);
  }
  gpuUtil_->setData(s.gpuUtilPct.x, s.gpuUtilPct.y, true);
  gpuUtil_->setName(gpuLegend());
  showGraph(gpuUtil_, !s.gpuUtilPct.isEmpty());
  links_->yAxis2->setVisible(gpuUtil_->visible());
  links_->rescaleAxes();
  links_->yAxis->setRange(0, std::max(linkTop * 1.1, 0.01));
  links_->yAxis2->setRange(0, 105);
  links_->replot(QCustomPlot::rpQueuedReplot);

  loss_->graph(0)->setData(s.loss.x, s.loss.y, true);
  loss_->graph(1)->setData(s.loss.x, smoothEma(s.loss.y, 0.9), true);
  loss_->graph(2)->setData(s.evalLoss.x, s.evalLoss.y, true);
  loss_->graph(3)->setData(s.lr.x, s.lr.y, true);
  loss_->rescaleAxes();
  loss_->replot(QCustomPlot::rpQueuedReplot);
  speed_->graph(0)->setData(s.tokensPerSecond.x, s.tokensPerSecond.y, true);
  speed_->graph(1)->setData(s.tflops.x, s.tflops.y, true);
  speed_->rescaleAxes();
  speed_->replot(QCustomPlot::rpQueuedReplot);
  timeline_->setSpans(s.spans);

  if (s.totalSteps > 0) progress_->setValue(static_cast<int>(1000 * s.lastStep / s.totalSteps));
  double recent = 0;
  const int k = std::min(20, s.stepSeconds.size());
  for (int i = s.stepSeconds.size() - k; i < s.stepSeconds.size(); ++i)
    recent += s.stepSeconds.y[i];
  const double eta = k ? recent / k * static_cast<double>(s.totalSteps - s.lastStep) : -1;
  progress_->setFormat(QString("step %1 / %2").arg(s.lastStep).arg(s.totalSteps));
  const bool stepped = !s.loss.isEmpty();
  status_->setText(
      tr("%1 · loss %2 · %3 tokens/s · %4 tokens · ETA %5")
          .arg(s.state.isEmpty() ? tr("starting") : s.state)
          .arg(stepped ? QString::number(s.loss.lastY(), 'f', 4) : QStringLiteral("—"))
          .arg(stepped ? QString::number(s.tokensPerSecond.lastY(), 'f', 0) : QStringLiteral("—"))
          .arg(formatCount(static_cast<double>(s.tokens)))
          .arg(s.state == "training" && k > 0 ? formatDuration(eta) : QStringLiteral("—")));
  const qint64 first = s.logTotal - s.log.size();  // the ring may have dropped older lines
  for (logShown_ = std::max(logShown_, first); logShown_ < s.logTotal; ++logShown_)
    log_->appendPlainText(s.log[static_cast<int>(logShown_ - first)]);
}

}  // namespace spillway::ui

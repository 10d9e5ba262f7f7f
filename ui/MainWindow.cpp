#include "MainWindow.h"

#include <signal.h>

#include <QActionGroup>
#include <QApplication>
#include <QCloseEvent>
#include <QDragEnterEvent>
#include <QDropEvent>
#include <QFileDialog>
#include <QFileInfo>
#include <QHBoxLayout>
#include <QIcon>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QMimeData>
#include <QScreen>
#include <QScrollArea>
#include <QSettings>
#include <QStackedWidget>
#include <QStatusBar>
#include <QStyle>
#include <algorithm>
#include <utility>

#include "AppPalette.h"
#include "ComparePage.h"
#include "DialogFolder.h"
#include "HistoryPage.h"
#include "JobSettings.h"
#include "LivePage.h"
#include "NewRunPage.h"
#include "PoolTask.h"
#include "RunHistoryModel.h"
#include "TryItPage.h"
#include "WheelGuard.h"
#include "WorkerClient.h"

// The icon is compiled into the static spillway_ui library; Q_INIT_RESOURCE keeps the linker from
// dropping it and must be called from the global namespace.
static void initResources() {
  Q_INIT_RESOURCE(spillway);
}

namespace spillway::ui {

MainWindow::MainWindow(const QString& dbPath, QWidget* parent) : QMainWindow(parent) {
  initResources();
  WheelGuard::install();  // before the pages' fields are made and polished
  setWindowTitle(tr("Spillway"));
  setWindowIcon(QIcon(":/spillway/spillway.svg"));
  setAcceptDrops(true);
  model_ = new RunHistoryModel(this);
  const QString error = model_->open(dbPath);
  buildPages();
  if (!error.isEmpty()) statusBar()->showMessage(tr("Run history unavailable: %1").arg(error));
  connectPages();
  buildFileMenu();
  buildViewMenu();
  buildRunMenu();
  buildHelpMenu();
  restoreSession();
  reattach();
}

void MainWindow::buildPages() {
  auto* central = new QWidget;
  auto* layout = new QHBoxLayout(central);
  sidebar_ = new QListWidget;
  sidebar_->addItems({tr("New run"), tr("Live"), tr("History"), tr("Compare"), tr("Try it")});
  sidebar_->setFixedWidth(130);
  stack_ = new QStackedWidget;
  newRun_ = new NewRunPage;
  live_ = new LivePage;
  live_->setDatabase(model_->databasePath());
  history_ = new HistoryPage(model_);
  compare_ = new ComparePage(model_);
  tryIt_ = new TryItPage(model_);
  // New run scrolls its own form; the other pages scroll up and down as a whole where the window
  // is lower than they need (a 1280 x 720 screen, or 1920 x 1080 at 200%), and reflow into its
  // width.
  stack_->addWidget(newRun_);
  for (QWidget* w : {static_cast<QWidget*>(live_), static_cast<QWidget*>(history_),
                     static_cast<QWidget*>(compare_), static_cast<QWidget*>(tryIt_)}) {
    auto* scroll = new QScrollArea;
    scroll->setFrameShape(QFrame::NoFrame);
    scroll->setWidgetResizable(true);
    scroll->setWidget(w);
    stack_->addWidget(scroll);
  }
  layout->addWidget(sidebar_);
  layout->addWidget(stack_, 1);
  setCentralWidget(central);
  connect(sidebar_, &QListWidget::currentRowChanged, stack_, &QStackedWidget::setCurrentIndex);
  connect(sidebar_, &QListWidget::currentRowChanged, this, [this](int row) {
    if (row == kHistory || row == kCompare) model_->refresh();  // Compare picks from its runs
  });
}

void MainWindow::connectPages() {
  connect(newRun_, &NewRunPage::launched, this, [this](const QString& runDir, qint64 pid) {
    rememberForm();
    live_->attach(runDir, pid);
    showPage(kLive);
  });
  // A run that ends while Live watches it (failed at start, its worker died) shows in History.
  connect(live_, &LivePage::runEnded, model_, &RunHistoryModel::refresh);
  connect(history_, &HistoryPage::openLive, this, [this](const QString& runDir) {
    live_->attach(runDir);
    showPage(kLive);
  });
  connect(history_, &HistoryPage::resumed, this, [this](const QString& runDir, qint64 pid) {
    live_->attach(runDir, pid);
    showPage(kLive);
  });
  connect(history_, &HistoryPage::cloneRun, this, [this](const QString& job) {
    JobSettings s = JobSettings::fromText(job.toUtf8());  // a 64-bit seed whole
    s.name += tr(" (clone)");
    newRun_->setSettings(s);
    showPage(kNewRun);
  });
  connect(history_, &HistoryPage::tryRun, this, [this](const QString& id) {
    tryIt_->setRun(id);
    showPage(kTryIt);
  });
  connect(history_, &HistoryPage::compareRuns, this, [this](const QStringList& ids) {
    compare_->setRuns(ids);
    showPage(kCompare);
  });
}

void MainWindow::buildFileMenu() {
  QMenu* file = menuBar()->addMenu(tr("&File"));
  file->addAction(tr("&New run"), QKeySequence::New, this, [this] { showPage(kNewRun); });
  file->addAction(tr("&Open job file…"), QKeySequence::Open, this, [this] {
    const QString path = QFileDialog::getOpenFileName(
        this, tr("Open job file"), DialogFolder::start("jobs"), tr("Job files (*.json)"));
    DialogFolder::remember("jobs", path);
    if (!path.isEmpty()) openJob(path);
  });
  // Ctrl+Shift+S: Ctrl+S is Live's Save checkpoint.
  file->addAction(
      tr("&Save job file…"), QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_S), this, [this] {
        const QString path = QFileDialog::getSaveFileName(
            this, tr("Save job file"), DialogFolder::start("jobs"), tr("Job files (*.json)"));
        DialogFolder::remember("jobs", path);
        if (!path.isEmpty()) saveJob(path);
      });
  file->addSeparator();
  file->addAction(tr("&Quit"), QKeySequence::Quit, this, &QWidget::close);
}

void MainWindow::buildViewMenu() {
  QMenu* view = menuBar()->addMenu(tr("&View"));
  const char* pages[] = {"New run", "Live", "History", "Compare", "Try it"};
  for (int i = 0; i < 5; ++i)
    view->addAction(tr(pages[i]), QKeySequence(Qt::CTRL | (Qt::Key_1 + i)), this,
                    [this, i] { showPage(Page(i)); });
  view->addSeparator();
  QMenu* theme = view->addMenu(tr("&Theme"));
  auto* themes = new QActionGroup(this);
  const QString current = QSettings().value("view/palette", "system").toString();
  for (const auto& [key, label] :
       {std::pair{"system", tr("Follow the &system")}, std::pair{"light", tr("&Light")},
        std::pair{"dark", tr("&Dark")}}) {
    QAction* a = theme->addAction(label);
    a->setCheckable(true);
    a->setChecked(current == key);
    themes->addAction(a);
    connect(a, &QAction::triggered, this, [k = QString(key)] {
      QSettings().setValue("view/palette", k);
      AppPalette::apply(k);
    });
  }
}

void MainWindow::buildRunMenu() {
  QMenu* run = menuBar()->addMenu(tr("&Run"));
  run->addAction(tr("&Plan"), QKeySequence(Qt::CTRL | Qt::Key_P), newRun_, &NewRunPage::plan);
  run->addAction(newRun_->measureAction());  // Ctrl+Shift+P, enabled as New run's Measure button
  run->addAction(tr("&Launch"), QKeySequence(Qt::CTRL | Qt::Key_Return), newRun_,
                 [this] { newRun_->launch(); });
  run->addSeparator();
  // Live's own actions: enabled only while its run can take them.
  run->addActions({live_->pauseAction(), live_->checkpointAction(), live_->stopAction()});
}

void MainWindow::buildHelpMenu() {
  QMenu* help = menuBar()->addMenu(tr("&Help"));
  help->addAction(tr("&About Spillway"), this, [this] {
    const QString worker = WorkerClient::workerPath();
    QMessageBox::about(
        this, tr("About Spillway"),
        tr("<h3>Spillway %1</h3><p>Spillway fine-tunes language models larger than the GPU: "
           "layers stream through the device, master weights and AdamW state live in DRAM and on "
           "the SSD.</p><p>Qt %2 · worker: %3</p>")
            .arg(QStringLiteral(SPILLWAY_VERSION), QString::fromLatin1(qVersion()),
                 worker.isEmpty() ? tr("not found") : worker.toHtmlEscaped()));
  });
}

void MainWindow::restoreSession() {
  QSettings settings;
  // The form as it was when the window last closed (or a run was launched).
  if (const nlohmann::json last =
          nlohmann::json::parse(settings.value(kLastJobKey).toByteArray().toStdString(), nullptr,
                                /*allow_exceptions=*/false);
      last.is_object())
    newRun_->setSettings(JobSettings::fromJson(last));
  resize(1500, 960);
  restoreGeometry(settings.value("window/geometry").toByteArray());
  restoreState(settings.value("window/state").toByteArray());
  fitToScreen();
  showPage(Page(settings.value("window/page", kNewRun).toInt()));
}

MainWindow::~MainWindow() = default;

QRect MainWindow::fittedGeometry(const QRect& wanted, const QRect& available,
                                 const QMargins& frame) {
  // The frame's parts (title bar, borders) count against the screen too.
  const QSize room = available.size().shrunkBy(frame);
  QRect fitted(wanted.topLeft(), wanted.size().boundedTo(room));
  const QRect inner = available.marginsRemoved(frame);
  // Moved (never resized again) so that the whole frame is on the screen.
  fitted.moveLeft(std::clamp(fitted.left(), inner.left(), inner.right() - fitted.width() + 1));
  fitted.moveTop(std::clamp(fitted.top(), inner.top(), inner.bottom() - fitted.height() + 1));
  return fitted;
}

void MainWindow::fitToScreen() {
  if (isMaximized() || isFullScreen()) return;  // the window manager fits those
  const QScreen* s = screen();
  if (!s) return;
  const QRect available = s->availableGeometry();
  // Before the window is shown its frame is not known: the style's title bar and frame, as
  // QWidget::restoreGeometry reckons them, stand in for it.
  const QRect outer = frameGeometry(), inner = geometry();
  QMargins frame(inner.left() - outer.left(), inner.top() - outer.top(),
                 outer.right() - inner.right(), outer.bottom() - inner.bottom());
  if (frame.isNull()) {
    const int border = style()->pixelMetric(QStyle::PM_MdiSubWindowFrameWidth, nullptr, this);
    const int title = style()->pixelMetric(QStyle::PM_TitleBarHeight, nullptr, this);
    frame = QMargins(border, title + border, border, border);
  }
  // A first window (no saved geometry) sits in the middle of the screen.
  QRect wanted = geometry();
  if (!QSettings().contains("window/geometry")) wanted.moveCenter(available.center());
  const QRect fitted = fittedGeometry(wanted, available, frame);
  if (fitted != geometry()) setGeometry(fitted);
}

void MainWindow::showPage(Page page) {
  sidebar_->setCurrentRow(page);
  stack_->setCurrentIndex(page);
}

bool MainWindow::saveJob(const QString& path) {
  QString error;
  if (!newRun_->saveJob(path, &error)) {
    QMessageBox::warning(this, tr("Save job file"), tr("The job was not saved: %1").arg(error));
    return false;
  }
  statusBar()->showMessage(tr("Saved the job to %1").arg(path));
  return true;
}

void MainWindow::rememberForm() {
  JobSettings s = newRun_->settings();
  s.runDir.clear();
  QSettings().setValue(kLastJobKey, QByteArray::fromStdString(s.toJson().dump(
                                        -1, ' ', false, nlohmann::json::error_handler_t::replace)));
}

bool MainWindow::openJob(const QString& path) {
  QString error;
  if (!newRun_->loadJob(path, &error)) {
    QMessageBox::warning(this, tr("Open job file"), error);
    return false;
  }
  showPage(kNewRun);
  return true;
}

void MainWindow::reattach() {
  const std::string path = model_->databasePath();
  if (path.empty()) return;
  runOnPool(
      this,
      [path]() -> std::pair<QString, qint64> {
        // Reads only, through a connection of its own: marking the runs of workers that are gone
        // is a write that waits for a worker's write lock, which History's read does. A run whose
        // recorded worker is gone, its pid reused by another process included, is not attached.
        auto store = RunStore::open(path, RunHistoryModel::connectionOptions());
        if (!store.ok()) return {};
        RunFilter f;
        f.status = RunStatus::kRunning;
        auto runs = (*store)->list_runs(f);
        if (!runs.ok()) return {};
        for (const RunInfo& r : *runs) {  // newest first
          if (!r.pid || !WorkerClient::alive(*r.pid)) continue;
          if (check_process(worker_of(r)) == Liveness::kGone) continue;
          return {QString::fromStdString(r.run_dir), *r.pid};
        }
        return {};
      },
      [this, page = stack_->currentIndex()](std::pair<QString, qint64> found) {
        const auto& [dir, pid] = found;
        if (!dir.isEmpty() && live_->runDir().isEmpty()) {
          live_->attach(dir, pid);
          // Shown unless a page was chosen meanwhile.
          if (stack_->currentIndex() == page) showPage(kLive);
        }
        emit reattached(dir);
      });
}

namespace {

// The one local path a drop carries, or "" (none, several, or not a local file).
QString droppedPath(const QMimeData* mime) {
  if (!mime || !mime->hasUrls() || mime->urls().size() != 1) return {};
  const QUrl url = mime->urls().front();
  return url.isLocalFile() ? url.toLocalFile() : QString();
}

}  // namespace

bool MainWindow::openDropped(const QMimeData* mime) {
  const QString path = droppedPath(mime);
  if (path.isEmpty()) return false;
  const QFileInfo info(path);
  if (info.isDir()) {
    newRun_->setModelPath(path);
  } else if (info.isFile()) {
    newRun_->setDatasetPath(path);
  } else {
    return false;
  }
  showPage(kNewRun);
  return true;
}

void MainWindow::dragEnterEvent(QDragEnterEvent* event) {
  if (!droppedPath(event->mimeData()).isEmpty()) event->acceptProposedAction();
}

void MainWindow::dropEvent(QDropEvent* event) {
  if (openDropped(event->mimeData())) event->acceptProposedAction();
}

void MainWindow::closeEvent(QCloseEvent* event) {
  // Closing the window never stops a run: the worker runs in its own session.
  QSettings settings;
  settings.setValue("window/geometry", saveGeometry());
  settings.setValue("window/state", saveState());
  settings.setValue("window/page", stack_->currentIndex());
  rememberForm();
  event->accept();
}

}  // namespace spillway::ui

// spillway: the desktop app. The window and its pages live in ui/.
//
// usage: spillway [options] [JOB.json]. A job file given (by a file manager through the desktop
// entry's %f, or by hand) opens on New run. Options: --db PATH (run store), --model DIR /
// --dataset FILE (preselect on New run), --attach RUN_DIR (show a run on Live), --palette
// system|light|dark, --screenshot DIR (after --wait seconds, save a PNG of each page into DIR and
// quit; the window as it first opens on the screen, fitted to it, or --size WxH logical pixels;
// History shows the newest run's loss curve, Try it a completed run's answers to "ROMEO:" — used
// by tests/ui/screenshots.sh and tests/packaging/install-test.sh under Xvfb). The man page
// packaging/man/spillway.1 is checked against --help.
#include <QApplication>
#include <QCommandLineParser>
#include <QDir>
#include <QEventLoop>
#include <QRegularExpression>
#include <QSettings>
#include <QTableView>
#include <QTimer>
#include <cstdio>

#include "AppPalette.h"
#include "ComparePage.h"
#include "HistoryPage.h"
#include "LivePage.h"
#include "MainWindow.h"
#include "NewRunPage.h"
#include "RunHistoryModel.h"
#include "TryItPage.h"

int main(int argc, char** argv) {
  QApplication app(argc, argv);
  QApplication::setOrganizationName("Spillway");
  QApplication::setApplicationName("Spillway");
  // The desktop entry's id: Wayland compositors match the window to it (and to its icon).
  QGuiApplication::setDesktopFileName("org.spillway.Spillway");
  QCommandLineParser parser;
  parser.setApplicationDescription("Spillway: fine-tune language models larger than the GPU");
  parser.addHelpOption();
  QCommandLineOption db("db", "Run store database.", "path"),
      model("model", "Model folder to preselect.", "dir"),
      dataset("dataset", "Dataset to preselect.", "file"),
      attach("attach", "Run folder to show live.", "dir"),
      shots("screenshot", "Save a PNG of each page into DIR and quit.", "dir"),
      wait("wait", "Seconds to wait before the screenshots.", "s", "6"),
      size("size",
           "Window size for the screenshots, in logical pixels (default: the first window's size "
           "on this screen).",
           "WxH"),
      palette("palette", "Look: system, light or dark (default: the View > Theme choice).", "mode");
  parser.addOptions({db, model, dataset, attach, shots, wait, size, palette});
  parser.addPositionalArgument("job.json", "A job file to open on New run.", "[job.json]");
  parser.process(app);
  spillway::ui::AppPalette::apply(parser.isSet(palette)
                                      ? parser.value(palette)
                                      : QSettings().value("view/palette", "system").toString());

  spillway::ui::MainWindow window(parser.value(db));
  if (parser.isSet(model)) window.newRunPage()->setModelPath(parser.value(model));
  if (parser.isSet(dataset)) window.newRunPage()->setDatasetPath(parser.value(dataset));
  if (parser.isSet(attach)) {
    window.livePage()->attach(parser.value(attach));
    window.showPage(spillway::ui::MainWindow::kLive);
  }
  if (parser.isSet(size)) {
    const QRegularExpressionMatch wh =
        QRegularExpression("^([1-9][0-9]{2,4})x([1-9][0-9]{2,4})$").match(parser.value(size));
    if (!wh.hasMatch()) {
      std::fprintf(stderr,
                   "spillway: --size %s is not a window size; give width x height in pixels, "
                   "e.g. --size 1280x720\n",
                   qPrintable(parser.value(size)));
      return 2;
    }
    window.resize(wh.captured(1).toInt(), wh.captured(2).toInt());
  }
  window.show();
  if (const QStringList jobs = parser.positionalArguments(); !jobs.isEmpty())
    window.openJob(jobs.first());
  if (parser.isSet(shots)) {
    const QString dir = parser.value(shots);
    window.newRunPage()->plan();  // in the background; done well before the screenshots
    QDir().mkpath(dir);
    QTimer::singleShot(
        static_cast<int>(parser.value(wait).toDouble() * 1000), &window, [&window, dir] {
          using W = spillway::ui::MainWindow;
          window.showPage(W::kNewRun);
          QApplication::processEvents();
          window.grab().save(dir + "/new-run.png");
          window.livePage()->tick();
          window.showPage(W::kLive);
          QApplication::processEvents();
          window.grab().save(dir + "/live.png");
          {  // History's rows come from a read on a pool thread
            QEventLoop read;
            QObject::connect(window.historyModel(), &spillway::ui::RunHistoryModel::refreshed,
                             &read, &QEventLoop::quit);
            window.historyModel()->refresh();
            if (window.historyModel()->loading()) read.exec();
          }
          window.showPage(W::kHistory);
          if (window.historyModel()->rowCount() > 0) {  // the newest run's loss curve below
            QEventLoop curve;
            QObject::connect(window.historyPage(), &spillway::ui::HistoryPage::curveShown, &curve,
                             &QEventLoop::quit);
            window.historyPage()->table()->selectRow(0);
            if (window.historyPage()->curveLoading()) curve.exec();
          }
          QApplication::processEvents();
          window.grab().save(dir + "/history.png");
          QStringList ids;
          for (int i = 0; i < window.historyModel()->rowCount() && i < 3; ++i)
            ids << QString::fromStdString(window.historyModel()->run(i).info.id);
          {  // Compare reads its runs on a pool thread
            QEventLoop read;
            QObject::connect(window.comparePage(), &spillway::ui::ComparePage::loaded, &read,
                             &QEventLoop::quit);
            window.comparePage()->setRuns(ids);
            if (window.comparePage()->loading()) read.exec();
          }
          window.showPage(W::kCompare);
          QApplication::processEvents();
          window.grab().save(dir + "/compare.png");
          // Try it on the newest finished run (it has an export), else on the newest run (its
          // latest checkpoint: the install test has only a stopped one), once both sides answered.
          int pick = window.historyModel()->rowCount() > 0 ? 0 : -1;
          for (int i = 0; i < window.historyModel()->rowCount(); ++i) {
            if (window.historyModel()->run(i).info.status != spillway::RunStatus::kCompleted)
              continue;
            pick = i;
            break;
          }
          if (pick >= 0) {
            window.tryItPage()->setRun(
                QString::fromStdString(window.historyModel()->run(pick).info.id));
            window.tryItPage()->setPrompt("ROMEO:");
          }
          window.showPage(W::kTryIt);
          QObject::connect(window.tryItPage(), &spillway::ui::TryItPage::generated, &window,
                           [&window, dir] {
                             QApplication::processEvents();
                             window.grab().save(dir + "/try-it.png");
                             QApplication::quit();
                           });
          QTimer::singleShot(60000, &window, [] { QApplication::quit(); });  // never hang
          if (!window.tryItPage()->generate()) {
            window.grab().save(dir + "/try-it.png");
            QApplication::quit();
          }
        });
  }
  return QApplication::exec();
}

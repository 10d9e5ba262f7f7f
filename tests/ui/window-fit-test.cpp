// The window fits a 1280 x 720 screen (issue 13: its minimum was 1552 x 719, and at 1280 x 800
// Browse, Tier placement, Plan and Launch were off-screen): its minimum size is within the screen
// less a title bar and a panel, and at that size and at 1920 x 1080 every control of every page is
// on screen and whole — unclipped, or in a scroll area that brings it into view — and no control
// is squeezed below its own minimum. CTest runs this at 100% and, with QT_SCALE_FACTOR=2, at 200%
// (WindowFit.At200Percent), where the same logical sizes must hold.
//
// The first window fits the screen it opens on (issue 26: a fresh profile opened at 1500 x 960 on
// a 1280 x 720 screen, Plan, Launch and the window's own buttons off-screen), and so does a
// geometry saved on a larger screen: WindowFitOnScreen.* checks the screen it runs on, which
// CTest sets to 1280 x 720, 1366 x 768, 1920 x 1080 and 1920 x 1080 at 200% (960 x 540 of
// logical pixels) through the offscreen platform's screen files in tests/ui/screens/
// (WindowFit.FirstWindowAt*); on any other screen they are skipped.
#include <gtest/gtest.h>
#include <qcustomplot.h>

#include <QAbstractButton>
#include <QAbstractSpinBox>
#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QJsonDocument>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QScreen>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSlider>
#include <QTest>
#include <filesystem>
#include <fstream>
#include <iostream>

#include "BlockStrip.h"
#include "ComparePage.h"
#include "HistoryPage.h"
#include "LivePage.h"
#include "MainWindow.h"
#include "NewRunPage.h"
#include "PlanView.h"
#include "TimelineView.h"
#include "TryItPage.h"
#include "history-wait.h"
#include "test-data.h"

namespace spillway::ui {
namespace {
using spillway::testing::TempDir;

// A 1280 x 720 screen less a 32 px panel and a 30 px title bar.
constexpr QSize kSmallest(1280, 720 - 32 - 30);

QScrollArea* scrollAreaOf(QWidget* w) {
  for (QWidget* p = w->parentWidget(); p; p = p->parentWidget())
    if (auto* sa = qobject_cast<QScrollArea*>(p)) return sa;
  return nullptr;
}

// Every control a user works with: buttons, fields, lists, spin boxes, sliders.
QList<QWidget*> controlsOf(QWidget* page) {
  QList<QWidget*> out;
  for (QWidget* w : page->findChildren<QWidget*>()) {
    if (!w->isVisibleTo(page) || w->window() != page->window()) continue;
    if (qobject_cast<QAbstractButton*>(w) || qobject_cast<QLineEdit*>(w) ||
        qobject_cast<QComboBox*>(w) || qobject_cast<QAbstractSpinBox*>(w) ||
        qobject_cast<QSlider*>(w)) {
      // A scroll bar's or a spin box's own parts are not controls of the page.
      if (qobject_cast<QScrollBar*>(w) ||
          (qobject_cast<QLineEdit*>(w) && qobject_cast<QAbstractSpinBox*>(w->parentWidget())))
        continue;
      if (qobject_cast<QLineEdit*>(w) && qobject_cast<QComboBox*>(w->parentWidget())) continue;
      out << w;
    }
  }
  return out;
}

QString describe(QWidget* w) {
  QString text;
  if (auto* b = qobject_cast<QAbstractButton*>(w)) text = b->text();
  return QString("%1 %2 \"%3\"").arg(w->metaObject()->className(), w->objectName(), text);
}

void expectEveryControlReachable(MainWindow& window, const QSize& size) {
  window.resize(size);
  QApplication::processEvents();
  ASSERT_EQ(window.size(), size) << "the window's minimum is larger";
  const char* names[] = {"New run", "Live", "History", "Compare", "Try it"};
  for (int p = 0; p < 5; ++p) {
    window.showPage(MainWindow::Page(p));
    QApplication::processEvents();
    QWidget* page = p == 0   ? static_cast<QWidget*>(window.newRunPage())
                    : p == 1 ? static_cast<QWidget*>(window.livePage())
                    : p == 2 ? static_cast<QWidget*>(window.historyPage())
                    : p == 3 ? static_cast<QWidget*>(window.comparePage())
                             : static_cast<QWidget*>(window.tryItPage());
    const QList<QWidget*> controls = controlsOf(page);
    if (p == 3 && window.comparePage()->runs().isEmpty()) {
      // No runs picked: the picker and what to do with it, no empty axes.
      EXPECT_TRUE(window.comparePage()->runPicker()->isVisible());
      EXPECT_TRUE(window.comparePage()->emptyState()->isVisible());
      EXPECT_FALSE(window.comparePage()->lossPlot()->isVisible());
    } else {
      EXPECT_GT(controls.size(), 2) << names[p];
    }
    for (QWidget* w : controls) {
      if (QScrollArea* sa = scrollAreaOf(w)) {
        // The whole widget (ensureWidgetVisible shows an editable combo box's text cursor, not
        // its frame), again until it holds for up to 2 s: a page may lay itself out again while
        // this runs (the GPU probe's or the plan's answer arriving moved Plan's Measure button
        // by 6 px in CI between scrolling and looking).
        for (int i = 0; i < 40; ++i) {
          const QPoint c = w->mapTo(sa->widget(), w->rect().center());
          sa->ensureVisible(c.x(), c.y(), w->width() / 2 + 1, w->height() / 2 + 1);
          QApplication::processEvents();
          if (i >= 1 && w->visibleRegion().boundingRect() == w->rect()) break;
          QTest::qWait(50);
        }
      }
      const QRect onWindow(w->mapTo(&window, QPoint(0, 0)), w->size());
      EXPECT_TRUE(window.rect().contains(onWindow))
          << names[p] << ": " << describe(w).toStdString() << " at " << onWindow.x() << ","
          << onWindow.y() << " " << onWindow.width() << "x" << onWindow.height() << " in "
          << size.width() << "x" << size.height();
      // Whole: nothing of it hidden by a parent's edge.
      EXPECT_EQ(w->visibleRegion().boundingRect(), w->rect())
          << names[p] << ": " << describe(w).toStdString() << " clipped in " << size.width() << "x"
          << size.height();
      const QSize least = w->minimumSizeHint().expandedTo(w->minimumSize());
      EXPECT_GE(w->width(), std::min(least.width(), w->maximumWidth()))
          << names[p] << ": " << describe(w).toStdString() << " squeezed";
    }
    // Nothing scrolls sideways: a page reflows into the width it has.
    for (QScrollArea* sa : page->window()->findChildren<QScrollArea*>()) {
      if (!sa->isVisible() || !sa->widgetResizable()) continue;
      EXPECT_FALSE(sa->horizontalScrollBar()->isVisible())
          << names[p] << " scrolls sideways at " << size.width() << "x" << size.height();
    }
  }
}

TEST(WindowFit, FitsA1280x720ScreenAndLarger) {
  TempDir tmp;
  qputenv("XDG_CONFIG_HOME", QByteArray::fromStdString(tmp.path() + "/config"));
  qputenv("XDG_DATA_HOME", QByteArray::fromStdString(tmp.path() + "/data"));
  // New run's GPU line with the longest message the probe gives: a CUDA module it cannot find, at
  // a deep path (a build folder's; it widened New run past 1280 in CI's clang build).
  qputenv("SPILLWAY_CUDA_BACKEND",
          "/check/work/main/build-asan/lib/x86_64-linux-gnu/spillway/libspillway-cuda.so");
  MainWindow window(QString::fromStdString(tmp.path() + "/runs.db"));
  // Live on a run with a long name that failed with a long message: neither widens the window. It
  // trained on two GPUs: the timeline's GPU chooser and its reduce lane take their room.
  const std::string run = tmp.path() + "/run";
  std::filesystem::create_directories(run);
  const std::string longName(240, 'n'), longPath = "/mnt/" + std::string(200, 'p');
  std::ofstream(run + "/job.json") << "{\"name\": \"" << longName << "\"}";
  std::ofstream(run + "/events.jsonl")
      << R"({"type":"state","t":0,"state":"training","total_steps":10})"
      << "\n";
  for (int device : {0, 1})
    for (const char* phase : {"forward", "reduce"})
      std::ofstream(run + "/events.jsonl", std::ios::app)
          << R"({"type":"span","t":0.5,"block":"layer","device":)" << device
          << R"(,"end_s":0.5,"layer":0,"phase":")" << phase << R"(","start_s":0.4})"
          << "\n";
  std::ofstream(run + "/events.jsonl", std::ios::app)
      << R"({"type":"error","t":1,"code":"io","message":"cannot lock )" << longPath
      << R"(/.lock: Read-only file system"})"
      << "\n"
      << R"({"type":"state","t":1,"state":"failed"})"
      << "\n";
  window.livePage()->attach(QString::fromStdString(run));
  ASSERT_TRUE(waitForLive(window.livePage()));  // the store is asked for its worker first
  // New run with a plan of a 80-layer model: its blocks by tier, the longest legend (moments on
  // the SSD) and a long why, none of which widens the page.
  window.newRunPage()->planView()->setPlan(
      PlanResult::fromJson(QJsonDocument::fromJson(
                               R"({"fits":true,"backend":"cuda","model":{"layers":80},
              "tiers":{"hbm":{"needed_bytes":7e10,"free_bytes":8e10,"total_bytes":8e10,
                              "categories":{"weights_bytes":4e9,"checkpoints_bytes":3e10,
                                            "workspace_bytes":6e9}},
                       "dram":{"needed_bytes":5e11,"free_bytes":6e11,"total_bytes":7e11},
                       "ssd":{"needed_bytes":5e11,"free_bytes":9e11,"total_bytes":1e12,
                              "categories":{"optimizer_bytes":5e11}}},
              "state":{"blocks":82,"hbm_blocks":7,"hbm_bytes":2.8e10,
                       "why":"the first 7 blocks' state fits beside every checkpoint; an 8th would push layer 79's checkpoints to DRAM and cost more than its CPU update saves"},
              "step":{"step_s":20,"tokens_per_s":3000,"bottleneck":"optimizer"}})")
                               .object()));
  ASSERT_TRUE(window.newRunPage()->planView()->blockStrip()->isVisibleTo(window.newRunPage()));
  ASSERT_EQ(window.livePage()->phase(), LivePage::Phase::kFailed);
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  window.showPage(MainWindow::Page(1));  // Live: its charts and timeline drawn
  QApplication::processEvents();
  ASSERT_EQ(window.livePage()->timeline()->devices(), QList<int>({0, 1}));
  ASSERT_TRUE(window.livePage()->timeline()->deviceChooser()->isVisibleTo(window.livePage()));
  const QSize least = window.minimumSizeHint().expandedTo(window.minimumSize());
  for (QWidget* page :
       {static_cast<QWidget*>(window.newRunPage()), static_cast<QWidget*>(window.livePage()),
        static_cast<QWidget*>(window.historyPage()), static_cast<QWidget*>(window.comparePage())})
    std::cout << page->metaObject()->className() << " needs at least "
              << page->minimumSizeHint().width() << " x " << page->minimumSizeHint().height()
              << "\n";
  std::cout << "minimum size " << least.width() << " x " << least.height() << " at scale "
            << window.devicePixelRatio() << "\n";
  if (qEnvironmentVariableIsSet("QT_SCALE_FACTOR"))  // WindowFit.At200Percent: really at 200%
    EXPECT_DOUBLE_EQ(window.devicePixelRatio(), qEnvironmentVariable("QT_SCALE_FACTOR").toDouble());
  EXPECT_LE(least.width(), kSmallest.width());
  EXPECT_LE(least.height(), kSmallest.height());
  expectEveryControlReachable(window, QSize(1280, 720));
  expectEveryControlReachable(window, kSmallest);
  expectEveryControlReachable(window, QSize(1920, 1080));
  // A 1920 x 1080 screen at 200% less a title bar and a panel: New run's forms one above the
  // other, History's buttons in two rows, nothing sideways.
  expectEveryControlReachable(window, QSize(952, 476));
  // Compare with runs picked shows its charts' controls (runs not in the store draw nothing).
  window.comparePage()->setRuns({"20250101-000000-aaaaaa", "20250101-000000-bbbbbb"});
  ASSERT_TRUE(waitForCompare(window.comparePage()));
  expectEveryControlReachable(window, QSize(952, 476));
  expectEveryControlReachable(window, QSize(1280, 720));
}

// The screens CTest runs WindowFitOnScreen.* on, in logical pixels: 1280 x 720, 1366 x 768,
// 1920 x 1080, and 1920 x 1080 at 200%.
bool onATestScreen() {
  const QSize screen = QGuiApplication::primaryScreen()->geometry().size();
  return screen == QSize(1280, 720) || screen == QSize(1366, 768) || screen == QSize(1920, 1080) ||
         screen == QSize(960, 540);
}

// A fresh profile: no saved window, no saved form.
struct FreshProfile {
  TempDir tmp;
  FreshProfile() {
    qputenv("XDG_CONFIG_HOME", QByteArray::fromStdString(tmp.path() + "/config"));
    qputenv("XDG_DATA_HOME", QByteArray::fromStdString(tmp.path() + "/data"));
    QSettings().clear();
  }
  QString db() const { return QString::fromStdString(tmp.path() + "/runs.db"); }
};

void expectOnScreen(const MainWindow& window) {
  const QRect available = window.screen()->availableGeometry();
  const QRect frame = window.frameGeometry();
  EXPECT_TRUE(available.contains(frame))
      << "the window's frame " << frame.x() << "," << frame.y() << " " << frame.width() << "x"
      << frame.height() << " is not within the screen's " << available.width() << "x"
      << available.height();
}

TEST(WindowFitOnScreen, TheFirstWindowFitsTheScreen) {
  if (!onATestScreen()) GTEST_SKIP() << "CTest runs this on its screens (WindowFit.FirstWindowAt*)";
  FreshProfile profile;
  MainWindow window(profile.db());
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  const QSize screen = window.screen()->availableGeometry().size();
  std::cout << "screen " << screen.width() << " x " << screen.height() << ", window "
            << window.width() << " x " << window.height() << " at scale "
            << window.devicePixelRatio() << "\n";
  expectOnScreen(window);
  // As large as the screen allows, up to its 1500 x 960.
  EXPECT_GE(window.width(), std::min(1500, screen.width() - 16));
  EXPECT_GE(window.height(), std::min(960, screen.height() - 64));
  // And every page usable at that size: Plan, Launch, Browse..., every control in view or scrolled
  // into it, nothing sideways.
  expectEveryControlReachable(window, window.size());
}

TEST(WindowFitOnScreen, AGeometrySavedOnALargerScreenFits) {
  if (!onATestScreen()) GTEST_SKIP() << "CTest runs this on its screens (WindowFit.FirstWindowAt*)";
  FreshProfile profile;
  {
    // The window as it was closed on a 2560 x 1600 screen: 2400 x 1500 at 100, 60.
    MainWindow before(profile.db());
    before.setGeometry(100, 60, 2400, 1500);
    QCloseEvent close;
    QApplication::sendEvent(&before, &close);
  }
  ASSERT_TRUE(QSettings().contains("window/geometry"));
  MainWindow window(profile.db());
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  expectOnScreen(window);
  expectEveryControlReachable(window, window.size());
}

TEST(WindowFit, FittedGeometryKeepsTheFrameOnTheScreen) {
  const QRect screen(0, 0, 1280, 720);
  const QMargins frame(1, 30, 1, 1);
  // The default size on a small screen: as large as the room, the frame on the screen.
  const QRect fitted = MainWindow::fittedGeometry(QRect(-110, -120, 1500, 960), screen, frame);
  EXPECT_EQ(fitted, QRect(1, 30, 1278, 689));
  // A window that fits stays where it is; one past the right edge moves back, whole.
  EXPECT_EQ(MainWindow::fittedGeometry(QRect(40, 50, 800, 600), screen, frame),
            QRect(40, 50, 800, 600));
  EXPECT_EQ(MainWindow::fittedGeometry(QRect(900, 50, 800, 600), screen, frame),
            QRect(479, 50, 800, 600));
  // On a second screen to the right, with a panel on top.
  EXPECT_EQ(MainWindow::fittedGeometry(QRect(0, 0, 3000, 2000), QRect(1920, 32, 1920, 1048), frame),
            QRect(1921, 62, 1918, 1017));
}

}  // namespace
}  // namespace spillway::ui

// MainWindow: the app's top-level window — New run, Live, History, Compare and Try it pages in a
// sidebar, menus with keyboard shortcuts, window state kept in QSettings. The window fits the
// screen it opens on (its first 1500 x 960, or a geometry saved on a larger screen, is fitted to
// the screen's available area with its frame), and every page works down to 960 x 540 logical
// pixels (a 1920 x 1080 screen at 200%): Live, History, Compare and Try it scroll up and down
// where the window is lower than they need, New run scrolls its own form. On start it re-attaches
// the Live page to a run that is still going, found in the run store on a pool thread (the window
// never waits on runs.db). A folder dropped on the window is New run's model, a file its dataset
// (openDropped). GUI thread; owns its pages through Qt parenting.
#pragma once

#include <QMainWindow>
#include <QMargins>
#include <QRect>

class QListWidget;
class QMimeData;
class QStackedWidget;

namespace spillway::ui {

class ComparePage;
class HistoryPage;
class LivePage;
class NewRunPage;
class RunHistoryModel;
class TryItPage;

class MainWindow : public QMainWindow {
  Q_OBJECT
 public:
  // `dbPath`: the run store (default: the worker's default database).
  explicit MainWindow(const QString& dbPath = QString(), QWidget* parent = nullptr);
  ~MainWindow() override;

  enum Page { kNewRun, kLive, kHistory, kCompare, kTryIt };
  void showPage(Page page);
  NewRunPage* newRunPage() const { return newRun_; }
  LivePage* livePage() const { return live_; }
  HistoryPage* historyPage() const { return history_; }
  ComparePage* comparePage() const { return compare_; }
  TryItPage* tryItPage() const { return tryIt_; }
  RunHistoryModel* historyModel() const { return model_; }
  // Looks for the newest run whose worker is still alive, reading the store on a pool thread; when
  // the read is back, attaches Live to it (unless Live follows a run by then) and shows Live
  // (unless another page was chosen meanwhile), and emits reattached() with its folder ("" when
  // none).
  void reattach();
  // Loads a job file into New run and shows that page (File › Open job file, `spillway JOB`, a
  // job opened from the file manager); on failure says why in a message box and returns false.
  bool openJob(const QString& path);
  // Writes New run's form as a job file (File › Save job file); on failure says why in a message
  // box and returns false.
  bool saveJob(const QString& path);
  // Where the last form is kept in QSettings (as a job's JSON): restored when a window opens,
  // written when one closes and when a run is launched.
  static constexpr const char* kLastJobKey = "newRun/lastJob";
  // The window's geometry `wanted` made to fit `available` (a screen's available geometry, in
  // logical pixels) with its `frame` (title bar and borders) around it: no larger than the room,
  // and moved so that the whole frame is on the screen.
  static QRect fittedGeometry(const QRect& wanted, const QRect& available, const QMargins& frame);
  // A drop of one local folder or file: a folder is New run's model (checked at once: a folder
  // without config.json says so under the field), a file its dataset; New run is shown. False,
  // nothing changed, for anything else (several paths, a URL that is not a local file).
  bool openDropped(const QMimeData* mime);

 signals:
  void reattached(const QString& runDir);

 protected:
  void closeEvent(QCloseEvent* event) override;
  void dragEnterEvent(QDragEnterEvent* event) override;
  void dropEvent(QDropEvent* event) override;

 private:
  // The window's parts, in the order the constructor builds them: the sidebar and the pages' stack
  // (each page shown by its sidebar row), the routes between the pages (a launched, opened or
  // resumed run goes to Live, a cloned one to New run, ...), the menus, and what QSettings kept
  // from the last session (New run's form, the geometry, the page shown).
  void buildPages();
  void connectPages();
  void buildFileMenu();
  void buildViewMenu();
  void buildRunMenu();
  void buildHelpMenu();
  void restoreSession();
  // Fits the window to its screen's available geometry: the default 1500 x 960 on a smaller screen,
  // and a geometry saved on a larger screen, or at a smaller scale.
  void fitToScreen();
  void rememberForm();
  RunHistoryModel* model_;
  QListWidget* sidebar_;
  QStackedWidget* stack_;
  NewRunPage* newRun_;
  LivePage* live_;
  HistoryPage* history_;
  ComparePage* compare_;
  TryItPage* tryIt_;
};

}  // namespace spillway::ui

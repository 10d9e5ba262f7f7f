// Forms that do not move or change under the pointer (issue 26, point 6), and dialogs that name the
// run they edit (point 7):
// - the mouse wheel over a spin box or combo box without the focus scrolls the page and leaves the
//   field as it was (micro-batch 1 became 3 while scrolling); with the focus it steps the field;
// - the dataset's status line keeps its height while the preview recomputes, so the fields below
//   it stay where the pointer aims;
// - a spin box refuses text that is not a value of its range ("-5" in Steps became 5), and says so;
// - file dialogs open at home or in the folder last chosen, never in the working directory;
// - History's Tags and Notes dialogs name the run, by name and id.
// Wheel events are sent as a mouse sends them (spontaneous), so that QApplication gives the focus
// by the field's policy and passes an ignored event on to the parents, as it does for a real wheel.
#include <QtTest/qtestspontaneevent.h>
#include <gtest/gtest.h>

#include <QAbstractSpinBox>
#include <QApplication>
#include <QComboBox>
#include <QDir>
#include <QDoubleSpinBox>
#include <QFileDialog>
#include <QInputDialog>
#include <QLabel>
#include <QLineEdit>
#include <QPushButton>
#include <QScrollArea>
#include <QScrollBar>
#include <QSettings>
#include <QSignalSpy>
#include <QSortFilterProxyModel>
#include <QSpinBox>
#include <QTableView>
#include <QTest>
#include <QTimer>
#include <QWheelEvent>
#include <functional>

#include "DatasetPanel.h"
#include "DialogFolder.h"
#include "HistoryPage.h"
#include "IntegerSpinBox.h"
#include "MainWindow.h"
#include "NewRunPage.h"
#include "RunHistoryModel.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
using spillway::testing::data_path;
using spillway::testing::TempDir;

std::string s(const QString& text) {
  return text.toStdString();
}

QScrollArea* scrollAreaOf(QWidget* w) {
  for (QWidget* p = w->parentWidget(); p; p = p->parentWidget())
    if (auto* sa = qobject_cast<QScrollArea*>(p)) return sa;
  return nullptr;
}

// One notch of a mouse wheel over the middle of `field` (up: positive), delivered to the widget
// under the pointer there (a spin box's line edit) as the window system delivers it.
void wheel(QWidget* field, int notches) {
  const QPoint center = field->rect().center();
  QWidget* target = field->childAt(center) ? field->childAt(center) : field;
  const QPoint pos = target->mapFrom(field, center);
  QWheelEvent e(pos, target->mapToGlobal(pos), QPoint(), QPoint(0, 120 * notches), Qt::NoButton,
                Qt::NoModifier, Qt::NoScrollPhase, false);
  QSpontaneKeyEvent::setSpontaneous(&e);
  QApplication::instance()->notify(target, &e);
}

// The field of job key `key` in `root`.
template <class T>
T* field(QWidget* root, const char* key) {
  for (T* w : root->findChildren<T*>())
    if (w->property("jobKey").toString() == key) return w;
  return nullptr;
}

// While it lives, answers the modal dialog of type T that is open, every 20 ms until it closes: a
// dialog's exec() runs its own event loop, in which the timer fires, and a file dialog still
// reading its folder may want a second try.
template <class T>
class ModalAnswer {
 public:
  explicit ModalAnswer(std::function<void(T*)> answer) {
    QObject::connect(&timer_, &QTimer::timeout, [answer] {
      if (auto* d = qobject_cast<T*>(QApplication::activeModalWidget())) answer(d);
    });
    timer_.start(20);
  }

 private:
  QTimer timer_;
};

// ---- the wheel -----------------------------------------------------------------------------

TEST(FormWheel, ScrollsThePageOverAFieldWithoutFocusAndStepsAFocusedOne) {
  TempDir tmp;
  MainWindow window(q(tmp.path() + "/runs.db"));
  window.resize(1280, 658);  // a 1280 x 720 screen less a panel and a title bar: New run scrolls
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  window.showPage(MainWindow::kNewRun);
  auto* microBatch = window.newRunPage()->findChild<QSpinBox*>("microBatch");
  ASSERT_NE(microBatch, nullptr);
  ASSERT_EQ(microBatch->value(), 1);
  QScrollBar* bar = scrollAreaOf(microBatch)->verticalScrollBar();
  ASSERT_GT(bar->maximum(), 0) << "New run does not scroll at 1280 x 658";
  bar->setValue(bar->maximum());
  field<QLineEdit>(window.newRunPage(), "name")->setFocus();
  QApplication::processEvents();

  // Up two notches while scrolling up the page over the field: the page scrolls, 1 stays 1.
  wheel(microBatch, 2);
  EXPECT_EQ(microBatch->value(), 1);
  EXPECT_FALSE(microBatch->hasFocus());
  EXPECT_LT(bar->value(), bar->maximum());

  // A combo box the same: Schedule keeps its choice.
  auto* schedule = field<QComboBox>(window.newRunPage(), "train.schedule");
  ASSERT_NE(schedule, nullptr);
  const QString choice = schedule->currentText();
  wheel(schedule, -1);
  wheel(schedule, 1);
  EXPECT_EQ(s(schedule->currentText()), s(choice));

  // Once the user has chosen the field (Tab or a click), the wheel steps it, and the page stays.
  microBatch->setFocus();
  QApplication::processEvents();
  const int scrolled = bar->value();
  wheel(microBatch, 2);
  EXPECT_EQ(microBatch->value(), 3);
  EXPECT_EQ(bar->value(), scrolled);
}

TEST(FormWheel, EveryFieldOfEveryPageTakesTheFocusByTabOrClickOnly) {
  TempDir tmp;
  MainWindow window(q(tmp.path() + "/runs.db"));
  window.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&window));
  int fields = 0;
  for (int p = 0; p < 5; ++p) {
    window.showPage(MainWindow::Page(p));  // a page's fields are polished as it is first shown
    QApplication::processEvents();
  }
  for (QWidget* w : window.findChildren<QWidget*>()) {
    if (!qobject_cast<QAbstractSpinBox*>(w) && !qobject_cast<QComboBox*>(w)) continue;
    ++fields;
    EXPECT_EQ(w->focusPolicy(), Qt::StrongFocus)
        << w->metaObject()->className() << " " << w->objectName().toStdString() << " "
        << w->property("jobKey").toString().toStdString();
  }
  EXPECT_GT(fields, 20);
}

// ---- the dataset's status line ----------------------------------------------------------------

// New run at the width it has in a 1280 x 720 window, with stories260K and tiny Shakespeare.
std::unique_ptr<NewRunPage> pageWithPreview(int width) {
  auto page = std::make_unique<NewRunPage>();
  page->resize(width, 600);
  page->setModelPath(q(data_path("models/stories260K")));
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  page->setDatasetPath(q(data_path("datasets/tinyshakespeare/input.txt")));
  page->show();
  EXPECT_TRUE(QTest::qWaitForWindowExposed(page.get()));
  EXPECT_TRUE(previewed.wait(20000));
  EXPECT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
  QApplication::processEvents();
  return page;
}

TEST(DatasetStatus, TheFieldsBelowStayPutWhileThePreviewRecomputes) {
  SPILLWAY_REQUIRE_DATA();
  // 1120: New run in a 1280 x 720 window; 900: a narrower one, where the line wraps further.
  for (int width : {1120, 900}) {
    SCOPED_TRACE(width);
    auto page = pageWithPreview(width);
    auto* label = page->findChild<QLabel*>("datasetLabel");
    auto* name = field<QLineEdit>(page.get(), "name");
    ASSERT_NE(label, nullptr);
    ASSERT_NE(name, nullptr);
    // Where Name is in the page's content once its layout has settled (a layout request can post
    // another).
    auto y = [&] {
      auto at = [&] { return name->mapTo(scrollAreaOf(name)->widget(), QPoint(0, 0)).y(); };
      int last = at();
      for (int same = 0, pass = 0; same < 3 && pass < 100; ++pass) {
        QApplication::processEvents();
        same = at() == last ? same + 1 : 0;
        last = at();
      }
      return last;
    };
    const int before = y();
    const QString shown = label->text();

    // A new sequence length: the preview recomputes, its line says so.
    QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
    auto* seqLen = page->findChild<QSpinBox*>("seqLen");
    seqLen->setValue(seqLen->value() / 2);
    const int reading = y();
    ASSERT_EQ(s(label->text()), "Reading dataset…");
    EXPECT_EQ(reading, before) << "while reading; the line said " << s(shown);

    ASSERT_TRUE(previewed.wait(20000));
    EXPECT_NE(s(label->text()), s(shown));
    EXPECT_EQ(y(), before) << "after";
  }
}

// ---- refused text ----------------------------------------------------------------------------

// Replaces `box`'s text by typing `text`, as a user who selected it all does.
void typeInto(QAbstractSpinBox* box, const QString& text) {
  box->setFocus();
  box->selectAll();
  QTest::keyClicks(box, text);
}

TEST(SpinBoxRefusal, TextThatIsNotAValueIsRefusedAndSaidNotReinterpreted) {
  NewRunPage page;
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  QPushButton* launch = nullptr;
  for (QPushButton* b : page.findChildren<QPushButton*>())
    if (b->text().remove('&') == "Launch") launch = b;
  ASSERT_NE(launch, nullptr);
  ASSERT_TRUE(launch->isEnabled());
  ASSERT_EQ(s(page.inputError()), "");

  struct Case {
    QAbstractSpinBox* box;
    QString typed, error;
  };
  auto* steps = page.findChild<QSpinBox*>("steps");
  auto* evalFraction = field<QDoubleSpinBox>(&page, "data.eval_fraction");
  auto* seed = field<IntegerSpinBox>(&page, "data.seed");
  ASSERT_NE(steps, nullptr);
  ASSERT_NE(evalFraction, nullptr);
  ASSERT_NE(seed, nullptr);
  steps->setValue(300);
  seed->setValue(7);
  const double fraction = evalFraction->value();
  const QString fractionText = evalFraction->text();
  const Case cases[] = {
      {steps, "-5", "Steps takes a whole number from 0 to 2,147,483,647: \"-5\" is not one."},
      {evalFraction, "2", "Eval fraction takes a number from 0.000 to 0.999: \"2\" is not one."},
      {seed, "-12",
       "Seed takes a whole number from 0 to 18446744073709551615: \"-12\" is not one."},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.typed.toStdString());
    const QString toolTip = c.box->toolTip();  // the key's description, default and range
    typeInto(c.box, c.typed);
    // Kept as typed, and refused: the value is the one before, the form says why and cannot be
    // launched until the field holds a value.
    EXPECT_EQ(s(c.box->text()), s(c.typed));
    EXPECT_EQ(s(page.inputError()), s(c.error));
    EXPECT_FALSE(launch->isEnabled());
    EXPECT_EQ(steps->value(), 300);
    EXPECT_EQ(evalFraction->value(), fraction);
    EXPECT_EQ(seed->value(), 7u);
    EXPECT_NE(c.box->palette().color(QPalette::Text), page.palette().color(QPalette::Text));
    EXPECT_TRUE(c.box->toolTip().startsWith(c.error)) << s(c.box->toolTip());

    // Editing ends: the field shows the value it kept, and the form can be used again.
    QTest::keyClick(c.box, Qt::Key_Return);
    EXPECT_EQ(s(page.inputError()), "");
    EXPECT_TRUE(launch->isEnabled());
    EXPECT_EQ(c.box->palette().color(QPalette::Text), page.palette().color(QPalette::Text));
    EXPECT_EQ(s(c.box->toolTip()), s(toolTip));
  }
  EXPECT_EQ(s(steps->text()), "300");
  EXPECT_EQ(s(evalFraction->text()), s(fractionText));
  EXPECT_EQ(s(seed->text()), "7");

  // A value of the range is taken as typed.
  typeInto(steps, "250");
  EXPECT_EQ(steps->value(), 250);
  EXPECT_EQ(s(page.inputError()), "");
}

// ---- file dialogs -----------------------------------------------------------------------------

TEST(FileDialogs, OpenAtHomeThenInTheFolderLastChosenNeverInTheWorkingDirectory) {
  SPILLWAY_REQUIRE_DATA();
  QApplication::setAttribute(Qt::AA_DontUseNativeDialogs);  // Qt's own, which a test can answer
  QSettings().remove("dialogs");
  TempDir cwd;  // the app started from a folder of no interest
  const QString startedIn = QDir::currentPath();
  ASSERT_TRUE(QDir::setCurrent(q(cwd.path())));
  const QString data = q(data_path("datasets/tinyshakespeare/input.txt"));

  NewRunPage page;
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  auto* panel = page.findChild<DatasetPanel*>();
  ASSERT_NE(panel, nullptr);
  QPushButton* browse = nullptr;
  for (QPushButton* b : panel->findChildren<QPushButton*>())
    if (b->text() == "Browse…") browse = b;
  ASSERT_NE(browse, nullptr);

  auto openedIn = [&](const QString& choose) {
    QString folder;
    ModalAnswer<QFileDialog> answer([&](QFileDialog* d) {
      if (folder.isEmpty()) folder = d->directory().absolutePath();
      if (choose.isEmpty()) return d->reject();
      // Typed into the file name field, as selectFile()'s text may be cleared as the folder loads.
      d->findChild<QLineEdit*>("fileNameEdit")->setText(choose);
      QMetaObject::invokeMethod(d, "accept");  // protected: the dialog's Open button
    });
    QTest::mouseClick(browse, Qt::LeftButton);
    return folder;
  };
  // The first time: home.
  EXPECT_EQ(s(openedIn(data)), s(QDir(DialogFolder::home()).absolutePath()));
  // The same file, however its path is spelled (the build's default data folder may hold "..").
  EXPECT_EQ(s(QFileInfo(panel->path()).canonicalFilePath()),
            s(QFileInfo(data).canonicalFilePath()));
  // With a dataset in the field: its folder.
  const QString dataFolder = QFileInfo(data).absolutePath();
  EXPECT_EQ(s(openedIn(QString())), s(dataFolder));
  // With the field emptied, and in the next session: where the last dataset was chosen.
  panel->setPath(QString());
  EXPECT_EQ(s(openedIn(QString())), s(dataFolder));
  EXPECT_EQ(s(QSettings().value("dialogs/datasets").toString()), s(dataFolder));
  // A relative path in the field is not taken against the working directory.
  panel->setPath("input.txt");
  EXPECT_EQ(s(openedIn(QString())), s(dataFolder));

  QSettings().remove("dialogs");
  QDir::setCurrent(startedIn);
}

// ---- History's dialogs ------------------------------------------------------------------------

TEST(HistoryDialogs, TagsAndNotesNameTheRunByNameAndId) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string first, second;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    RunInfo info;
    info.name = "shakespeare";
    info.status = RunStatus::kCompleted;
    info.run_dir = tmp.path() + "/a";
    first = *(*store)->create_run(info);
    info.run_dir = tmp.path() + "/b";
    second = *(*store)->create_run(info);  // two runs of one name
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  HistoryPage page(&model);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));

  for (const std::string& id : {first, second}) {
    auto* proxy = qobject_cast<QSortFilterProxyModel*>(page.table()->model());
    for (int r = 0; r < proxy->rowCount(); ++r) {
      const QModelIndex i = proxy->index(r, RunHistoryModel::kName);
      if (model.run(proxy->mapToSource(i).row()).info.id == id) page.table()->setCurrentIndex(i);
    }
    const QString run = QString("\"shakespeare\" (%1)").arg(q(id));
    for (const QString button : {"Tags…", "Notes…"}) {
      SCOPED_TRACE(button.toStdString());
      QPushButton* b = nullptr;
      for (QPushButton* p : page.findChildren<QPushButton*>())
        if (p->text() == button) b = p;
      ASSERT_NE(b, nullptr);
      QString title, label;
      ModalAnswer<QInputDialog> answer([&](QInputDialog* d) {
        title = d->windowTitle();
        label = d->labelText();
        d->reject();
      });
      QTest::mouseClick(b, Qt::LeftButton);
      if (button == "Tags…") {
        EXPECT_EQ(s(title), s("Tags of " + run));
        EXPECT_EQ(s(label), s("Tags of " + run + ", comma-separated:"));
      } else {
        EXPECT_EQ(s(title), s("Notes on " + run));
        EXPECT_EQ(s(label), s("Notes on " + run + ":"));
      }
    }
  }
}

}  // namespace
}  // namespace spillway::ui

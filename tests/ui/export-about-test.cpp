// Compare's exports say where they went (and the CSV carries each run's name and eval loss), and
// Help › About names the version. Drives the real buttons and answers their dialogs.
#include <gtest/gtest.h>

#include <QAction>
#include <QApplication>
#include <QFile>
#include <QFileDialog>
#include <QImage>
#include <QLabel>
#include <QLineEdit>
#include <QMessageBox>
#include <QPushButton>
#include <QTest>
#include <QTimer>
#include <QUrl>
#include <functional>

#include "ComparePage.h"
#include "MainWindow.h"
#include "RunHistoryModel.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
using spillway::testing::TempDir;

// Runs `answer` on the modal dialog that `open` brings up; fails when none comes.
void answerModal(const std::function<void()>& open, const std::function<void(QWidget*)>& answer) {
  bool answered = false;
  QTimer::singleShot(200, [&] {
    QWidget* modal = QApplication::activeModalWidget();
    if (!modal) return;
    answered = true;
    answer(modal);
  });
  open();
  EXPECT_TRUE(answered) << "no dialog came";
}

// Types `path` into a save dialog's file name field and presses Save, as a person would.
void chooseFile(QFileDialog* dialog, const QString& path) {
  auto* name = dialog->findChild<QLineEdit*>("fileNameEdit");
  ASSERT_NE(name, nullptr);
  name->setText(path);
  QMetaObject::invokeMethod(dialog, "accept");
}

QPushButton* buttonOf(QWidget* page, const QString& text) {
  for (QPushButton* b : page->findChildren<QPushButton*>())
    if (b->text() == text) return b;
  return nullptr;
}

TEST(ComparePage, ExportsSayWhereTheyWentAndTheCsvHasNamesAndEvalLoss) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string id;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    RunInfo info;
    info.name = "lr 1e-3, \"warm\"";  // a comma and quotes: quoted in the CSV
    info.status = RunStatus::kCompleted;
    auto made = (*store)->create_run(info);
    ASSERT_TRUE(made.ok());
    id = *made;
    ASSERT_TRUE((*store)->add_metric(id, MetricRow{1, 2.5, 1e-3, 1.0, 100, 100.0, 0.1, 1.0}).ok());
    ASSERT_TRUE(
        (*store)->add_metric(id, MetricRow{2, 2.25, 1e-3, 0.5, 200, 110.0, 0.11, 2.0}).ok());
    ASSERT_TRUE((*store)->add_eval(id, EvalRow{0, 3.0, 20.0, 0.1}).ok());  // before training
    ASSERT_TRUE((*store)->add_eval(id, EvalRow{2, 2.375, 10.7, 2.1}).ok());
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  ComparePage page(&model);
  page.resize(1100, 700);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  page.setRuns({q(id)});
  ASSERT_TRUE(waitForCompare(&page));
  auto* status = page.findChild<QLabel*>("exportStatus");
  ASSERT_NE(status, nullptr);
  EXPECT_FALSE(status->isVisible());  // nothing exported yet

  const QString csvPath = q(tmp.path() + "/out/metrics.csv");
  QDir().mkpath(q(tmp.path() + "/out"));
  answerModal([&] { QTest::mouseClick(buttonOf(&page, "Export CSV…"), Qt::LeftButton); },
              [&](QWidget* modal) {
                auto* dialog = qobject_cast<QFileDialog*>(modal);
                ASSERT_NE(dialog, nullptr);
                chooseFile(dialog, csvPath);
              });
  EXPECT_TRUE(status->isVisible());
  EXPECT_EQ(page.exportMessage().toStdString(),
            ("Saved 3 rows of 1 run to " + csvPath + " · open folder").toStdString());
  EXPECT_TRUE(status->text().contains(
      "href=\"" + QUrl::fromLocalFile(q(tmp.path() + "/out")).toString(QUrl::FullyEncoded) + "\""))
      << status->text().toStdString();
  QFile csv(csvPath);
  ASSERT_TRUE(csv.open(QIODevice::ReadOnly));
  const QString qid = q(id);
  EXPECT_EQ(
      QString::fromUtf8(csv.readAll()),
      "run_id,run_name,step,loss,eval_loss,lr,grad_norm,tokens,tokens_per_s,model_tflops,t_s\n" +
          qid + ",\"lr 1e-3, \"\"warm\"\"\",0,,3,,,,,,\n" + qid +
          ",\"lr 1e-3, \"\"warm\"\"\",1,2.5,,0.001,1,100,100,0.1,1\n" + qid +
          ",\"lr 1e-3, \"\"warm\"\"\",2,2.25,2.375,0.001,0.5,200,110,0.11,2\n");

  const QString pngPath = q(tmp.path() + "/out/charts.png");
  answerModal([&] { QTest::mouseClick(buttonOf(&page, "Export chart…"), Qt::LeftButton); },
              [&](QWidget* modal) {
                auto* dialog = qobject_cast<QFileDialog*>(modal);
                ASSERT_NE(dialog, nullptr);
                chooseFile(dialog, pngPath);
              });
  EXPECT_EQ(page.exportMessage().toStdString(),
            ("Saved the charts of 1 run to " + pngPath + " · open folder").toStdString());
  EXPECT_GE(QImage(pngPath).width(), 1800);
}

TEST(MainWindow, AboutNamesTheVersion) {
  TempDir tmp;
  qputenv("XDG_CONFIG_HOME", QByteArray::fromStdString(tmp.path() + "/config"));
  MainWindow window(q(tmp.path() + "/runs.db"));
  QAction* about = nullptr;
  for (QAction* a : window.findChildren<QAction*>())
    if (a->text() == "&About Spillway") about = a;
  ASSERT_NE(about, nullptr);
  QString text;
  answerModal([&] { about->trigger(); },
              [&](QWidget* modal) {
                auto* box = qobject_cast<QMessageBox*>(modal);
                ASSERT_NE(box, nullptr);
                text = box->text();
                box->accept();
              });
  EXPECT_TRUE(text.startsWith(QString("<h3>Spillway %1</h3>").arg(SPILLWAY_VERSION)))
      << text.toStdString();
  EXPECT_TRUE(text.contains(QString("Qt %1").arg(qVersion()))) << text.toStdString();
}

}  // namespace
}  // namespace spillway::ui

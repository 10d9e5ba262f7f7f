// Issue 27 point 4: picking a model is easy. New run's "Hugging Face cache…" lists the cache with
// family, size and whether the job fits this machine (the real worker's planner), picks one into
// the field; a folder dropped on the window is the model, a file the dataset.
#include <gtest/gtest.h>

#include <QApplication>
#include <QComboBox>
#include <QFileInfo>
#include <QLabel>
#include <QMimeData>
#include <QPushButton>
#include <QSignalSpy>
#include <QTableWidget>
#include <QTest>
#include <QUrl>
#include <filesystem>
#include <fstream>

#include "DatasetPanel.h"
#include "MainWindow.h"
#include "ModelCacheDialog.h"
#include "ModelPicker.h"
#include "NewRunPage.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::data_path;
using spillway::testing::TempDir;

// A hub cache as huggingface_hub lays it out, its files links to `model`'s (read in place).
void addSnapshot(const std::string& hub, const std::string& repoFolder, const std::string& model) {
  const fs::path snap = fs::path(hub) / repoFolder / "snapshots" / "rev1";
  fs::create_directories(snap);
  for (const auto& f : fs::directory_iterator(model))
    fs::create_symlink(f.path(), snap / f.path().filename());
}

std::string goldenModel(const std::string& name) {
  return std::string(SPILLWAY_SOURCE_DIR) + "/tests/golden/" + name + "/model";
}

TEST(ModelCache, ListsTheCacheAndPicksAModelThatCanTrain) {
  SPILLWAY_REQUIRE_DATA();
  REQUIRE_WORKER();
  qputenv("SPILLWAY_WORKER", SPILLWAY_WORKER_BINARY);
  TempDir hub;
  addSnapshot(hub.path(), "models--karpathy--stories260K", data_path("models/stories260K"));
  // The newer families, as their random-initialised golden models (tests/golden).
  addSnapshot(hub.path(), "models--tiny--gemma3", goldenModel("gemma3-tiny"));
  addSnapshot(hub.path(), "models--tiny--phi3", goldenModel("phi3-tiny"));
  addSnapshot(hub.path(), "models--tiny--qwen3", goldenModel("qwen3-tiny"));
  fs::create_directories(hub.path() + "/models--openai--gpt2/snapshots/r");
  std::ofstream(hub.path() + "/models--openai--gpt2/snapshots/r/config.json")
      << R"({"architectures": ["GPT2LMHeadModel"], "model_type": "gpt2"})";

  ModelCacheDialog dialog(QString(), q(hub.path()));
  QSignalSpy listed(&dialog, &ModelCacheDialog::listed);
  ASSERT_TRUE(dialog.listing());  // the worker runs as a child: the constructor did not wait
  ASSERT_TRUE(listed.wait(60000));
  QTableWidget* table = dialog.table();
  ASSERT_EQ(table->rowCount(), 5);
  EXPECT_EQ(dialog.findChild<QLabel*>()->text(),
            "5 models in the cache, 4 that Spillway can train. Double-click one to use it.");
  // SPILLWAY_SCREENSHOT_DIR: a picture of the list for the docs (tests/ui/figures).
  if (const char* dir = getenv("SPILLWAY_SCREENSHOT_DIR")) {
    dialog.resize(1000, 300);
    dialog.show();
    QTest::qWait(100);
    dialog.grab().save(QString(dir) + "/model-cache.png");
  }
  EXPECT_EQ(table->item(0, 0)->text(), "karpathy/stories260K");
  EXPECT_EQ(table->item(0, 1)->text(), "Llama");
  EXPECT_EQ(table->item(0, 2)->text(), "260.0 k");
  EXPECT_EQ(table->item(0, 4)->text(), "yes");
  EXPECT_TRUE(table->item(0, 5)->text().startsWith("fits"))
      << table->item(0, 5)->text().toStdString();
  EXPECT_EQ(table->item(1, 0)->text(), "openai/gpt2");
  EXPECT_EQ(table->item(1, 4)->text(), "cannot train");
  // The reason alone: the row names the model, its tooltip the folder.
  EXPECT_TRUE(table->item(1, 5)->text().startsWith(
      "config.json: architecture 'GPT2LMHeadModel' is not supported; supported: "))
      << table->item(1, 5)->text().toStdString();
  EXPECT_EQ(table->item(2, 1)->text(), "Gemma 3");
  EXPECT_EQ(table->item(3, 1)->text(), "Phi-3 / Phi-4");
  EXPECT_EQ(table->item(4, 1)->text(), "Qwen3");
  for (int row : {2, 3, 4}) EXPECT_EQ(table->item(row, 4)->text(), "yes") << row;

  QPushButton* use = nullptr;
  for (QPushButton* b : dialog.findChildren<QPushButton*>())
    if (b->text() == "Use this model") use = b;
  ASSERT_NE(use, nullptr);
  table->selectRow(1);
  EXPECT_FALSE(use->isEnabled());  // a model Spillway cannot train is not picked
  table->selectRow(0);
  ASSERT_TRUE(use->isEnabled());
  QTest::mouseClick(use, Qt::LeftButton);
  EXPECT_EQ(dialog.result(), QDialog::Accepted);
  EXPECT_EQ(dialog.chosenPath(), q(hub.path() + "/models--karpathy--stories260K/snapshots/rev1"));
}

TEST(ModelCache, AnEmptyCacheSaysHowToGetAModel) {
  REQUIRE_WORKER();
  qputenv("SPILLWAY_WORKER", SPILLWAY_WORKER_BINARY);
  TempDir hub;
  ModelCacheDialog dialog(QString(), q(hub.path()));
  QSignalSpy listed(&dialog, &ModelCacheDialog::listed);
  ASSERT_TRUE(listed.wait(60000));
  EXPECT_EQ(dialog.table()->rowCount(), 0);
  const QLabel* status = dialog.findChild<QLabel*>();
  ASSERT_NE(status, nullptr);
  EXPECT_TRUE(status->text().startsWith("No models in the Hugging Face cache"))
      << status->text().toStdString();
}

QMimeData* urls(const QStringList& paths) {
  auto* mime = new QMimeData;
  QList<QUrl> list;
  for (const QString& p : paths) list << QUrl::fromLocalFile(p);
  mime->setUrls(list);
  return mime;
}

TEST(ModelDrop, AFolderDroppedOnTheWindowIsTheModelAFileTheDataset) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  MainWindow window(q(tmp.path() + "/runs.db"));
  window.showPage(MainWindow::kHistory);
  const QString model = q(data_path("models/stories260K"));
  std::unique_ptr<QMimeData> folder(urls({model}));
  // Through the events a window manager delivers: the drag is accepted, the drop taken.
  QDragEnterEvent enter(QPoint(10, 10), Qt::CopyAction, folder.get(), Qt::LeftButton,
                        Qt::NoModifier);
  QApplication::sendEvent(&window, &enter);
  EXPECT_TRUE(enter.isAccepted());
  QDropEvent drop(QPointF(10, 10), Qt::CopyAction, folder.get(), Qt::LeftButton, Qt::NoModifier);
  QApplication::sendEvent(&window, &drop);
  EXPECT_TRUE(drop.isAccepted());
  EXPECT_EQ(window.newRunPage()->modelPicker()->path(), model);
  EXPECT_TRUE(window.newRunPage()->modelInfo().ok)
      << window.newRunPage()->modelInfo().error.toStdString();
  EXPECT_EQ(window.newRunPage()->modelInfo().family, "Llama");

  const QString data = q(data_path("datasets/tinyshakespeare/input.txt"));
  std::unique_ptr<QMimeData> file(urls({data}));
  EXPECT_TRUE(window.openDropped(file.get()));
  EXPECT_EQ(window.newRunPage()->settings().trainPath, data);

  // Two paths, or a URL that is not a local file, are refused and change nothing.
  std::unique_ptr<QMimeData> two(urls({model, data}));
  QDragEnterEvent enterTwo(QPoint(10, 10), Qt::CopyAction, two.get(), Qt::LeftButton,
                           Qt::NoModifier);
  QApplication::sendEvent(&window, &enterTwo);
  EXPECT_FALSE(enterTwo.isAccepted());
  EXPECT_FALSE(window.openDropped(two.get()));
  QMimeData web;
  web.setUrls({QUrl("https://huggingface.co/Qwen/Qwen3-0.6B")});
  EXPECT_FALSE(window.openDropped(&web));
  EXPECT_EQ(window.newRunPage()->modelPicker()->path(), model);

  // A folder that is not a model says so under the field.
  std::unique_ptr<QMimeData> notModel(urls({q(tmp.path())}));
  EXPECT_TRUE(window.openDropped(notModel.get()));
  EXPECT_FALSE(window.newRunPage()->modelInfo().ok);
  EXPECT_TRUE(window.newRunPage()->modelInfo().error.contains("config.json"))
      << window.newRunPage()->modelInfo().error.toStdString();
}

}  // namespace
}  // namespace spillway::ui

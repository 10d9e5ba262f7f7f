// Every figure the New run page and History show is true or marked as an estimate (issue 26):
// a CPU run's device memory is its arena in DRAM, not HBM; the memory bars count the runtime; the
// plan's ETA is for the job's steps and a plan that does not fit has none; a plan that does not
// fit, or a dataset preview in red, holds Launch off and says why; the preview flags a sequence
// longer than the model's positions; the GPU's line goes when the CPU backend is chosen.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <QComboBox>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QPushButton>
#include <QSignalSpy>
#include <QSpinBox>
#include <QTest>
#include <filesystem>
#include <fstream>

#include "NewRunPage.h"
#include "PlacementForm.h"
#include "PlanResult.h"
#include "PlanView.h"
#include "RunHistoryModel.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
using spillway::testing::TempDir;

// A CPU plan as `spillway-worker plan --json` writes it: stories260K's 18.6 MB in DRAM beside the
// runtime's 270 MB, 200 steps of 0.25 s.
nlohmann::json cpuPlan() {
  return nlohmann::json::parse(R"json({
    "fits": true, "reason": "", "backend": "cpu", "micro_batch_size": 8, "grad_accum": 1,
    "seq_len": 256, "checkpoints": "device",
    "tiers": {
      "hbm": {"categories": {}, "needed_bytes": 14000000, "total_bytes": 0, "free_bytes": 0,
              "runtime_bytes": 0},
      "dram": {"categories": {}, "needed_bytes": 18600000, "total_bytes": 25300000000,
               "free_bytes": 24000000000, "runtime_bytes": 270000000},
      "ssd": {"categories": {}, "needed_bytes": 0, "total_bytes": 0, "free_bytes": 0}},
    "step": {"step_s": 0.25, "tokens_per_s": 8192, "eta_s": 50, "total_steps": 200,
             "bottleneck": "compute", "calibrated": true}})json");
}

TEST(PlanFigures, ACpuPlanNamesItsArenaAndCountsTheRuntime) {
  PlanView view;
  view.setPlan(PlanResult::fromJson(
      QJsonDocument::fromJson(QByteArray::fromStdString(cpuPlan().dump())).object()));
  // Not "HBM": the CPU backend's device is an arena in host memory.
  EXPECT_EQ(view.tierName(0), "Arena (CPU, in DRAM)");
  EXPECT_EQ(view.tierName(1), "DRAM");
  // The DRAM bar's need is what Measure's peak will be near: the job's and the runtime's.
  EXPECT_EQ(view.tierText(1),
            "needs 288.6 MB (18.6 MB for the job + about 270.0 MB runtime) · free 24.0 GB · "
            "total 25.3 GB");
  EXPECT_EQ(view.tierText(0), "needs 14.0 MB · free unbounded · total unbounded");
  EXPECT_EQ(view.plan().summary(),
            "Predicted: step 0.25 s · 8,192 tokens/s · ETA 50.0 s for 200 steps · bottleneck "
            "compute");
  // A GPU plan keeps HBM.
  nlohmann::json gpu = cpuPlan();
  gpu["backend"] = "cuda";
  const PlanResult g = PlanResult::fromPlan(*plan_from_json(gpu));
  EXPECT_EQ(g.tiers[0].name, "HBM");
}

TEST(PlanFigures, NoEtaForAPlanThatDoesNotFitAndEstimatesSaySo) {
  nlohmann::json j = cpuPlan();
  j["fits"] = false;
  j["reason"] = "data.seq_len 100000 is beyond the model's max_position_embeddings 512";
  j["step"]["eta_s"] = 822000;
  const PlanResult misfit = PlanResult::fromPlan(*plan_from_json(j));
  EXPECT_EQ(misfit.summary(), "Does not fit (below): no step time or ETA.");
  j = cpuPlan();
  j["step"]["calibrated"] = false;
  EXPECT_TRUE(PlanResult::fromPlan(*plan_from_json(j))
                  .summary()
                  .startsWith("Rough estimate, not calibrated on this machine: step 0.25 s"));
  j = cpuPlan();
  j["step"]["total_steps"] = 0;  // steps from epochs, not known to a plain plan
  EXPECT_TRUE(
      PlanResult::fromPlan(*plan_from_json(j)).summary().contains("ETA when the steps are known"));
}

// A page with stories260K on tiny Shakespeare, shown, its first preview done.
std::unique_ptr<NewRunPage> readyPage() {
  auto page = std::make_unique<NewRunPage>();
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  page->setModelPath(q(testing::data_path("models/stories260K")));
  page->setDatasetPath(q(testing::data_path("datasets/tinyshakespeare/input.txt")));
  page->show();
  EXPECT_TRUE(QTest::qWaitForWindowExposed(page.get()));
  EXPECT_TRUE(previewed.wait(30000));
  EXPECT_TRUE(page->datasetPreview().ok) << page->datasetPreview().error.toStdString();
  return page;
}

TEST(PlanFigures, APlanThatDoesNotFitHoldsLaunchOffUntilASettingChanges) {
  SPILLWAY_REQUIRE_DATA();
  TempDir tmp;
  // A worker that answers every plan with one that does not fit.
  nlohmann::json misfit = cpuPlan();
  misfit["fits"] = false;
  misfit["reason"] = "DRAM: needs 1117.56 GB but 24.00 GB is available";
  const std::string worker = tmp.path() + "/fake-worker";
  std::ofstream(worker) << "#!/bin/sh\necho '" << misfit.dump() << "'\nexit 3\n";
  ::chmod(worker.c_str(), 0755);
  qputenv("SPILLWAY_WORKER", QByteArray::fromStdString(worker));
  auto page = readyPage();
  auto* launch = page->findChild<QPushButton*>("launch");
  ASSERT_NE(launch, nullptr);
  EXPECT_TRUE(launch->isEnabled());
  QSignalSpy planned(page.get(), &NewRunPage::planned);
  page->plan();
  ASSERT_TRUE(planned.wait(20000));
  qunsetenv("SPILLWAY_WORKER");
  EXPECT_FALSE(page->planView()->plan().fits);
  EXPECT_FALSE(launch->isEnabled());
  EXPECT_EQ(launch->toolTip(),
            "Cannot launch: the plan does not fit: DRAM: needs 1117.56 GB but 24.00 GB is "
            "available");
  EXPECT_EQ(page->planView()->findChild<QLabel*>("planSummary")->text(),
            "Does not fit (below): no step time or ETA.");
  // A setting the plan rests on changes: the old verdict no longer holds Launch off.
  auto* microBatch = page->findChild<QSpinBox*>("microBatch");
  ASSERT_NE(microBatch, nullptr);
  microBatch->setValue(microBatch->value() + 1);
  EXPECT_TRUE(launch->isEnabled()) << launch->toolTip().toStdString();
}

TEST(PlanFigures, ASequenceBeyondTheModelsPositionsIsFlaggedAndHoldsLaunchOff) {
  SPILLWAY_REQUIRE_DATA();
  auto page = readyPage();
  auto* launch = page->findChild<QPushButton*>("launch");
  auto* seqLen = page->findChild<QSpinBox*>("seqLen");
  ASSERT_TRUE(launch && seqLen);
  QSignalSpy previewed(page.get(), &NewRunPage::datasetPreviewed);
  seqLen->setValue(1024);  // stories260K has 512 positions
  ASSERT_TRUE(previewed.wait(30000));
  const DatasetPreview& p = page->datasetPreview();
  EXPECT_TRUE(p.ok);  // the samples are still shown
  EXPECT_EQ(p.beyondPositions,
            "Sequence length 1024 is beyond the model's 512 positions (max_position_embeddings): "
            "lower it to 512 or less.");
  EXPECT_TRUE(page->findChild<QLabel*>("datasetLabel")->text().contains("beyond the model's 512"));
  EXPECT_FALSE(launch->isEnabled());
  EXPECT_TRUE(launch->toolTip().startsWith(
      "Cannot launch: the dataset preview shows an error: Sequence length 1024 is beyond"))
      << launch->toolTip().toStdString();
  seqLen->setValue(256);
  ASSERT_TRUE(previewed.wait(30000));
  EXPECT_TRUE(page->datasetPreview().beyondPositions.isEmpty());
  EXPECT_TRUE(launch->isEnabled()) << launch->toolTip().toStdString();
}

TEST(PlanFigures, TheGpuLineGoesWhenTheCpuBackendIsChosen) {
  PlacementForm form;
  form.show();
  auto* hint = form.findChild<QLabel*>("gpuHint");
  ASSERT_NE(hint, nullptr);
  QComboBox* backend = nullptr;
  for (QComboBox* c : form.findChildren<QComboBox*>())
    if (c->findText("cpu") >= 0) backend = c;
  ASSERT_NE(backend, nullptr);
  backend->setCurrentText("auto");
  EXPECT_TRUE(hint->isVisibleTo(&form));
  backend->setCurrentText("cpu");
  EXPECT_FALSE(hint->isVisibleTo(&form));
  backend->setCurrentText("cuda");
  EXPECT_TRUE(hint->isVisibleTo(&form));
}

// History: a CPU run's peak "device" memory is its arena, and says so; a GPU run's is HBM.
TEST(PlanFigures, HistoryNamesACpuRunsArena) {
  TempDir dir;
  const std::string db = dir.path() + "/runs.db";
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    for (const char* backend : {"cpu", "cuda"}) {
      RunInfo info;
      info.name = backend;
      info.run_dir = dir.path() + "/" + backend;
      std::filesystem::create_directories(info.run_dir);
      info.software_json = std::string(R"({"backend":")") + backend + "\"}";
      auto id = (*store)->create_run(info);
      ASSERT_TRUE(id.ok());
      ASSERT_TRUE(
          (*store)->add_sample(*id, 1.0, R"({"tiers":{"hbm":{"used_bytes":3500000}}})").ok());
      ASSERT_TRUE((*store)
                      ->set_step_figures(*id, R"({"peak_hbm_bytes":3000000})",
                                         R"({"peak_hbm_bytes":3500000})")
                      .ok());
      ASSERT_TRUE((*store)->finish_run(*id, RunStatus::kCompleted, {}).ok());
    }
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  ASSERT_EQ(model.rowCount(), 2);
  EXPECT_EQ(model.headerData(RunHistoryModel::kPeakHbm, Qt::Horizontal, Qt::DisplayRole),
            "Peak device");
  for (int row = 0; row < 2; ++row) {
    const bool cpu = model.run(row).info.name == "cpu";
    const QString cell =
        model.data(model.index(row, RunHistoryModel::kPeakHbm), Qt::DisplayRole).toString();
    EXPECT_EQ(cell, cpu ? "3.50 MB (CPU arena)" : "3.50 MB");
    const QString tip =
        model.data(model.index(row, RunHistoryModel::kStepTime), Qt::ToolTipRole).toString();
    EXPECT_EQ(tip.contains("Peak arena (CPU, in DRAM): 3.00 MB → 3.50 MB"), cpu)
        << tip.toStdString();
    EXPECT_EQ(tip.contains("Peak HBM"), !cpu) << tip.toStdString();
  }
}

}  // namespace
}  // namespace spillway::ui

// The HBM state tier in the app (issue 24, point 5): New run's plan draws the blocks by the tier
// their master, gradients and moments live in and splits the HBM bar into the state and the rest;
// Live's HBM chart stacks the state tier beside weights, gradient buffers, checkpoints and
// workspace; History and Compare say how many blocks each run's plan kept in HBM (the job form's
// placement.hbm_state_blocks: job-form-test.cpp). Plans are the engine's Plan written by its own
// to_json (events/plan.h), so the fixtures are the worker's format.
#include <gtest/gtest.h>
#include <qcustomplot.h>

#include <QJsonDocument>
#include <QTableWidget>
#include <filesystem>
#include <fstream>
#include <utility>
#include <vector>

#include "BlockStrip.h"
#include "ComparePage.h"
#include "LivePage.h"
#include "PartsBar.h"
#include "PlanView.h"
#include "RunHistoryModel.h"
#include "TierChart.h"
#include "events/plan.h"
#include "history-runs.h"
#include "history-wait.h"
#include "history/run-store.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::TempDir;
using Tier = StatePlacement::Tier;

constexpr uint64_t kGB = 1'000'000'000;

// A llama2-7b-like plan on an 80 GB GPU: 32 layers, so 34 blocks; the first `hbmBlocks` of them
// in HBM, their state `stateBytes`; with `state` false the plan is as a worker before the HBM
// state tier wrote it (no "state").
Plan planOf(int hbmBlocks, uint64_t stateBytes, bool state = true) {
  Plan p;
  p.fits = true;
  p.backend = "cuda";
  p.micro_batch_size = 8;
  p.grad_accum = 2;
  p.seq_len = 2048;
  p.model.architecture = "LlamaForCausalLM";
  p.model.parameters = 6.74e9;
  p.model.layers = 32;
  p.model.hidden_size = 4096;
  p.model.vocab_size = 32000;
  p.hbm.weights_bytes = 2 * kGB;
  p.hbm.gradients_bytes = 1 * kGB;  // the gradient buffers
  p.hbm.checkpoints_bytes = 8 * kGB;
  p.hbm.workspace_bytes = 3 * kGB;
  if (stateBytes > 0) {  // the state tier's master and moments, as a planner may list them
    p.hbm.master_bytes = stateBytes / 4;
    p.hbm.optimizer_bytes = stateBytes / 2;
  }
  p.hbm.needed_bytes = 14 * kGB + stateBytes;
  p.hbm.free_bytes = 79 * kGB;
  p.hbm.total_bytes = 80 * kGB;
  p.dram.master_bytes = 27 * kGB;
  p.dram.gradients_bytes = 27 * kGB;
  p.dram.optimizer_bytes = 54 * kGB;
  p.dram.needed_bytes = 108 * kGB;
  p.dram.free_bytes = 200 * kGB;
  p.dram.total_bytes = 256 * kGB;
  p.ssd.master_bytes = 0;
  p.ssd.optimizer_bytes = 0;
  if (state) {
    p.state.blocks = 34;
    p.state.hbm_blocks = hbmBlocks;
    p.state.hbm_bytes = stateBytes;
    p.state.why =
        "the first 18 blocks' state fits beside every checkpoint; more would push "
        "checkpoints to DRAM";
  }
  p.step.step_s = 1.6;
  p.step.tokens_per_s = 10240;
  p.step.bottleneck = "compute";
  return p;
}

PlanResult resultOf(const Plan& plan) {
  const QByteArray text = QByteArray::fromStdString(to_json(plan).dump());
  return PlanResult::fromJson(QJsonDocument::fromJson(text).object());
}

// A tier bar's parts are these categories with these bytes, in this order.
void expectParts(const QVector<TierPart>& parts,
                 const std::vector<std::pair<const char*, double>>& expected) {
  ASSERT_EQ(parts.size(), static_cast<qsizetype>(expected.size()));
  for (size_t i = 0; i < expected.size(); ++i) {
    EXPECT_EQ(parts[i].category, expected[i].first) << i;
    EXPECT_DOUBLE_EQ(parts[i].bytes, expected[i].second) << i;
  }
}

// The host tiers per block (issue 24, BlockTiers): after the HBM blocks, DRAM, then the moments on
// the SSD, then master and moments there, each its own colour, legend item and tooltip line.
TEST(HbmStatePlan, DrawsEachBlocksHostTier) {
  Plan plan = planOf(4, 4 * kGB);
  plan.state.dram_blocks = 20;  // blocks 0..19, the first 4 of them in HBM
  plan.state.ssd_moments_blocks = 10;
  plan.state.ssd_blocks = 4;
  plan.state.host_why = "blocks 0-19 in DRAM; blocks 20-29 with the moments on the SSD; ...";
  plan.ssd.optimizer_bytes = 20 * kGB;
  plan.ssd.master_bytes = 3 * kGB;
  const PlanResult r = resultOf(plan);
  ASSERT_TRUE(r.ok);
  PlanView view;
  view.setPlan(r);
  BlockStrip* strip = view.blockStrip();
  EXPECT_EQ(strip->cellsIn(Tier::kHbm), 4);
  EXPECT_EQ(strip->cellsIn(Tier::kDram), 16);
  EXPECT_EQ(strip->cellsIn(Tier::kSsdMoments), 10);
  EXPECT_EQ(strip->cellsIn(Tier::kSsd), 4);
  EXPECT_EQ(strip->cellTier(3), Tier::kHbm);
  EXPECT_EQ(strip->cellTier(19), Tier::kDram);
  EXPECT_EQ(strip->cellTier(20), Tier::kSsdMoments);
  EXPECT_EQ(strip->cellTier(30), Tier::kSsd);
  EXPECT_EQ(view.stateLegend(),
            "■ HBM: 4 blocks (4.00 GB)  ■ DRAM: 16 blocks  ■ DRAM + SSD (moments): 10 blocks  "
            "■ SSD (master and moments): 4 blocks")
      << view.stateLegend().toStdString();
  EXPECT_TRUE(view.stateCaption().endsWith("\n" + QString::fromStdString(plan.state.host_why)))
      << view.stateCaption().toStdString();
  EXPECT_EQ(strip->toolTip(), view.stateCaption());
  EXPECT_NE(BlockStrip::tierColor(Tier::kSsdMoments), BlockStrip::tierColor(Tier::kSsd));
  // A plan from before the per-block tiers: every block past the HBM ones in one host tier.
  Plan old = planOf(4, 4 * kGB);
  old.ssd.optimizer_bytes = 54 * kGB;
  const PlanResult o = resultOf(old);
  EXPECT_EQ(o.state.dramBlocks, -1);
  EXPECT_EQ(o.state.count(Tier::kSsdMoments), 30);
}

TEST(HbmStatePlan, DrawsTheFirstBlocksInHbmAndTheStateInTheHbmBar) {
  const uint64_t state = 18 * kGB;
  const PlanResult r = resultOf(planOf(18, state));
  ASSERT_TRUE(r.ok);
  EXPECT_EQ(r.state.blocks, 34);
  EXPECT_EQ(r.state.hbmBlocks, 18);
  EXPECT_EQ(r.state.text(), "HBM state: 18 of 34 blocks");
  PlanView view;
  view.setPlan(r);
  BlockStrip* strip = view.blockStrip();
  EXPECT_TRUE(strip->isVisibleTo(&view));
  EXPECT_EQ(strip->cellsIn(Tier::kHbm), 18);
  EXPECT_EQ(strip->cellsIn(Tier::kDram), 16);
  EXPECT_EQ(strip->cellsIn(Tier::kSsd), 0);
  // In forward order: the embedding and the first 17 layers; layer 17 on is the CPU's.
  EXPECT_EQ(strip->cellTier(0), Tier::kHbm);
  EXPECT_EQ(strip->cellTier(17), Tier::kHbm);
  EXPECT_EQ(strip->cellTier(18), Tier::kDram);
  EXPECT_EQ(strip->cellTier(33), Tier::kDram);
  EXPECT_EQ(r.state.blockName(0), "embedding");
  EXPECT_EQ(r.state.blockName(18), "layer 17");
  EXPECT_EQ(r.state.blockName(33), "head");
  EXPECT_EQ(view.stateLegend(), "■ HBM: 18 blocks (18.0 GB)  ■ DRAM: 16 blocks")
      << view.stateLegend().toStdString();
  EXPECT_EQ(view.stateCaption(), QString::fromStdString(planOf(18, state).state.why));
  EXPECT_EQ(strip->toolTip(), view.stateCaption());
  // The HBM bar: the state first, then weights, the gradient buffers (what the tier needs
  // beyond the rest: the state's gradients are not counted twice), checkpoints, workspace.
  expectParts(view.tierBar(0)->parts(), {{"state", 18e9},
                                         {"weights", 2e9},
                                         {"gradients", 1e9},
                                         {"checkpoints", 8e9},
                                         {"workspace", 3e9}});
  EXPECT_TRUE(view.tierBar(0)->toolTip().startsWith(
      "HBM state (master, gradients, moments) 18.0 GB · weights 2.00 GB"))
      << view.tierBar(0)->toolTip().toStdString();
  // DRAM's bar by its categories; no state part there.
  const QVector<TierPart>& dram = view.tierBar(1)->parts();
  ASSERT_EQ(dram.size(), 3);
  EXPECT_EQ(dram[0].category, "master");
  EXPECT_EQ(dram[2].category, "optimizer");
  EXPECT_DOUBLE_EQ(dram[2].bytes, 54e9);
}

// Saved activations (placement.saved_activation_layers, mlp_recompute_layers): the plan's HBM
// category activations_bytes; the HBM bar draws them as a part of their own, named in its tooltip.
TEST(HbmStatePlan, SavedActivationsAreAPartOfTheHbmBar) {
  Plan plan = planOf(0, 0);
  plan.state.saved_activation_layers = 2;
  plan.state.mlp_recompute_layers = 4;
  plan.hbm.checkpoints_bytes = 3 * kGB;
  plan.hbm.activations_bytes = 5 * kGB;
  PlanView view;
  view.setPlan(resultOf(plan));
  expectParts(view.tierBar(0)->parts(), {{"weights", 2e9},
                                         {"gradients", 1e9},
                                         {"checkpoints", 3e9},
                                         {"activations", 5e9},
                                         {"workspace", 3e9}});
  EXPECT_NE(view.tierBar(0)->toolTip().indexOf(
                "checkpoints 3.00 GB · saved activations (the layers that skip the recompute) "
                "5.00 GB"),
            -1)
      << view.tierBar(0)->toolTip().toStdString();
  EXPECT_NE(categoryColor("activations"), categoryColor("checkpoints"));
}

TEST(HbmStatePlan, AnOldPlanWithoutStateDrawsEveryBlockInDram) {
  PlanView view;
  view.setPlan(resultOf(planOf(0, 0, /*state=*/false)));
  BlockStrip* strip = view.blockStrip();
  EXPECT_TRUE(strip->isVisibleTo(&view));
  EXPECT_EQ(strip->placement().blocks, 34);  // the model's 32 layers, the embedding, the head
  EXPECT_EQ(strip->cellsIn(Tier::kDram), 34);
  EXPECT_EQ(strip->cellsIn(Tier::kHbm), 0);
  EXPECT_EQ(view.stateLegend(), "■ DRAM: 34 blocks");
  EXPECT_EQ(view.stateCaption(), "This plan keeps every block's state off the GPU.");
  for (const TierPart& p : view.tierBar(0)->parts()) EXPECT_NE(p.category, "state");
  ASSERT_FALSE(view.tierBar(0)->parts().isEmpty());
  EXPECT_EQ(view.tierBar(0)->parts()[1].category, "gradients");
  EXPECT_DOUBLE_EQ(view.tierBar(0)->parts()[1].bytes, 1e9);

  // The moments on the SSD: the other blocks' state is partly there, and the strip says so.
  Plan ssd = planOf(4, 4 * kGB);
  ssd.ssd.optimizer_bytes = 54 * kGB;
  view.setPlan(resultOf(ssd));
  EXPECT_EQ(strip->cellsIn(Tier::kHbm), 4);
  EXPECT_EQ(strip->cellsIn(Tier::kSsdMoments), 30);
  EXPECT_EQ(strip->cellsIn(Tier::kDram), 0);
  EXPECT_TRUE(view.stateLegend().endsWith("■ DRAM + SSD (moments): 30 blocks"))
      << view.stateLegend().toStdString();

  // A plan that names no model (an older worker's, or a damaged one): no strip.
  Plan bare = planOf(0, 0, false);
  bare.model.layers = 0;
  view.setPlan(resultOf(bare));
  EXPECT_FALSE(strip->isVisibleTo(&view));
  // A worker's error: no strip either.
  view.setPlan(PlanResult::fromWorkerOutput(R"({"message":"no model"})", "", 2));
  EXPECT_FALSE(strip->isVisibleTo(&view));
}

TierChart* hbmChartOf(const LivePage& live) {
  for (TierChart* c : live.findChildren<TierChart*>())
    if (c->tier() == "hbm") return c;
  return nullptr;
}

TEST(HbmStateLive, TheHbmChartStacksTheStateTierWhenTheSamplesCarryIt) {
  TempDir withState, without;
  {
    std::ofstream f(withState.path() + "/events.jsonl");
    f << R"({"type":"plan","t":0.1,"fits":true,"backend":"cuda","machine":{}})"
      << "\n";
    // The device's gradients are the two buffers (0.5 GB) and the state tier's (1 GB, as many
    // bytes as its master); its master and moments are the state tier's only.
    for (int i = 1; i <= 3; ++i)
      f << R"({"type":"sample","t":)" << i
        << R"(,"tiers":{"hbm":{"capacity_bytes":8e10,"weights_bytes":2e9,"gradients_bytes":1.5e9,)"
        << R"("master_bytes":1e9,"optimizer_bytes":2e9,"checkpoints_bytes":3e9,"workspace_bytes":1e9}}})"
        << "\n";
  }
  {
    std::ofstream f(without.path() + "/events.jsonl");
    f << R"({"type":"sample","t":1,"tiers":{"hbm":{"capacity_bytes":8e10,"weights_bytes":2e9,)"
      << R"("gradients_bytes":5e8,"master_bytes":0,"optimizer_bytes":0,"checkpoints_bytes":3e9,"workspace_bytes":1e9}}})"
      << "\n";
  }
  LivePage live;
  live.attach(q(withState.path()), 12345);
  const RunSeries& s = live.series();
  EXPECT_EQ(s.tierBytes["hbm"]["state"].size(), 3);
  EXPECT_DOUBLE_EQ(s.tierBytes["hbm"]["state"].lastY(), 4e9);  // 1 + 1 + 2 GB
  EXPECT_DOUBLE_EQ(s.tierBytes["hbm"]["gradients"].lastY(), 5e8);
  EXPECT_FALSE(s.tierBytes["hbm"].contains("master"));
  TierChart* hbm = hbmChartOf(live);
  ASSERT_NE(hbm, nullptr);
  EXPECT_TRUE(hbm->categoryShown("state"));
  EXPECT_EQ(hbm->newestBytes("state"), 4e9);
  EXPECT_EQ(hbm->newestBytes("gradients"), 5e8);
  EXPECT_EQ(hbm->newestBytes("weights"), 2e9);
  // The whole stack is what the device holds: 2 + 0.5 + 4 + 3 + 1 GB.
  EXPECT_EQ(hbm->heading(), "HBM (device): 10.5 GB of 80.0 GB") << hbm->heading().toStdString();
  // The stack's top is the state tier's band plus those below and above it.
  const QCPGraph* stateGraph = nullptr;
  for (int i = 0; i < hbm->graphCount(); ++i)
    if (hbm->graph(i)->name() == "state tier") stateGraph = hbm->graph(i);
  ASSERT_NE(stateGraph, nullptr);
  EXPECT_DOUBLE_EQ((stateGraph->data()->constEnd() - 1)->value, 6.5);  // GB: 2 + 0.5 + 4
  // In the legend in its place in the stack: weights, gradients, state tier, ...
  ASSERT_GE(hbm->legend->itemCount(), 3);
  auto* third = qobject_cast<QCPPlottableLegendItem*>(hbm->legend->item(2));
  ASSERT_NE(third, nullptr);
  EXPECT_EQ(third->plottable(), stateGraph);
  // DRAM keeps master and optimizer as they were.
  TierChart* dram = nullptr;
  for (TierChart* c : live.findChildren<TierChart*>())
    if (c->tier() == "dram") dram = c;
  ASSERT_NE(dram, nullptr);
  EXPECT_FALSE(dram->categoryShown("state"));

  // A run without the state tier (its samples' master and optimizer 0): no state in the legend.
  live.attach(q(without.path()), 12345);
  EXPECT_FALSE(hbm->categoryShown("state"));
  EXPECT_EQ(hbm->newestBytes("state"), 0.0);
  EXPECT_EQ(hbm->newestBytes("gradients"), 5e8);
}

// The saved activations (Category::kActivations, "activations_bytes" in a sample): their own band
// above the checkpoints, "saved activations" in the legend, only in runs that have some.
TEST(HbmStateLive, TheHbmChartStacksTheSavedActivationsWhenTheSamplesCarryThem) {
  TempDir with, without;
  for (const auto& [dir, activations] : {std::pair{&with, 5e9}, std::pair{&without, 0.0}}) {
    std::ofstream f(dir->path() + "/events.jsonl");
    for (int i = 1; i <= 2; ++i)
      f << R"({"type":"sample","t":)" << i
        << R"(,"tiers":{"hbm":{"capacity_bytes":8e10,"weights_bytes":2e9,"gradients_bytes":5e8,)"
        << R"("checkpoints_bytes":3e9,"activations_bytes":)" << activations
        << R"(,"workspace_bytes":1e9}}})"
        << "\n";
  }
  LivePage live;
  live.attach(q(with.path()), 12345);
  TierChart* hbm = hbmChartOf(live);
  ASSERT_NE(hbm, nullptr);
  EXPECT_TRUE(hbm->categoryShown("activations"));
  EXPECT_EQ(hbm->newestBytes("activations"), 5e9);
  EXPECT_EQ(hbm->heading(), "HBM (device): 11.5 GB of 80.0 GB") << hbm->heading().toStdString();
  const QCPGraph* saved = nullptr;
  for (int i = 0; i < hbm->graphCount(); ++i)
    if (hbm->graph(i)->name() == "saved activations") saved = hbm->graph(i);
  ASSERT_NE(saved, nullptr);
  EXPECT_DOUBLE_EQ((saved->data()->constEnd() - 1)->value, 10.5);  // GB: 2 + 0.5 + 3 + 5
  live.attach(q(without.path()), 12345);
  EXPECT_FALSE(hbm->categoryShown("activations"));
}

// A run in `store` whose events.jsonl holds `plan` as its plan event (none when null) after a few
// lines of loading; `inStore`: the plan goes to runs.db's events.
std::string addRun(RunStore& store, const std::string& root, const std::string& name,
                   const std::optional<Plan>& plan, bool inStore = false) {
  return addCompletedRun(store, root, name, R"({"placement":{"hbm_state_blocks":-1}})",
                         plan ? std::optional<nlohmann::json>(to_json(*plan)) : std::nullopt,
                         inStore);
}

TEST(HbmStateHistory, HistoryAndCompareShowThePlacementOfEachRun) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string placed, old, stored, none;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    Plan saved_plan = planOf(18, 18 * kGB);
    saved_plan.state.saved_activation_layers = 2;
    saved_plan.state.mlp_recompute_layers = 25;
    placed = addRun(**store, tmp.path(), "placed", saved_plan);
    old = addRun(**store, tmp.path(), "old", planOf(0, 0, /*state=*/false));
    stored = addRun(**store, tmp.path(), "stored", planOf(34, 40 * kGB), /*inStore=*/true);
    none = addRun(**store, tmp.path(), "none", std::nullopt);
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  auto cell = [&](const std::string& id, int role) {
    return model.data(model.index(model.rowOfRun(q(id)), RunHistoryModel::kHbmState), role)
        .toString();
  };
  EXPECT_EQ(model.headerData(RunHistoryModel::kHbmState, Qt::Horizontal, Qt::DisplayRole),
            "HBM state");
  EXPECT_EQ(cell(placed, Qt::DisplayRole), "18 of 34 blocks");
  EXPECT_EQ(cell(old, Qt::DisplayRole), "0 of 34 blocks");
  EXPECT_EQ(cell(stored, Qt::DisplayRole), "34 of 34 blocks");
  EXPECT_EQ(cell(none, Qt::DisplayRole), "—");
  EXPECT_EQ(cell(placed, Qt::ToolTipRole), "HBM state: 18 of 34 blocks (18.0 GB)\n" +
                                               QString::fromStdString(planOf(18, 0).state.why));
  // The run's details (its name's tooltip) say it too.
  const QString details =
      model.data(model.index(model.rowOfRun(q(placed)), RunHistoryModel::kName), Qt::ToolTipRole)
          .toString();
  EXPECT_TRUE(details.contains("\nHBM state: 18 of 34 blocks")) << details.toStdString();
  EXPECT_EQ(
      model.data(model.index(model.rowOfRun(q(placed)), RunHistoryModel::kHbmState), Qt::UserRole)
          .toInt(),
      18);

  // Compare: the plans' placements beside the job's placement.hbm_state_blocks.
  ComparePage page(&model);
  page.setRuns({q(placed), q(old), q(none)});
  ASSERT_TRUE(waitForCompare(&page));
  QTableWidget* diff = page.diffTable();
  int row = -1;
  for (int r = 0; r < diff->rowCount(); ++r)
    if (diff->item(r, 0)->text() == ComparePage::kPlannedStateKey) row = r;
  ASSERT_GE(row, 0);
  EXPECT_EQ(diff->item(row, 1)->text(), "18 of 34 blocks");
  EXPECT_EQ(diff->item(row, 2)->text(), "0 of 34 blocks");
  EXPECT_EQ(diff->item(row, 3)->text(), "—");
  // And what each plan saved of the activations, beside placement.saved_activation_layers.
  row = -1;
  for (int r = 0; r < diff->rowCount(); ++r)
    if (diff->item(r, 0)->text() == ComparePage::kPlannedSavedKey) row = r;
  ASSERT_GE(row, 0);
  EXPECT_EQ(diff->item(row, 1)->text(), "2 layers whole, 25 without the MLP's");
  EXPECT_EQ(diff->item(row, 2)->text(), "none");
  EXPECT_EQ(diff->item(row, 3)->text(), "—");
  // A plan from runs.db's events.
  page.setRuns({q(placed), q(stored)});
  ASSERT_TRUE(waitForCompare(&page));
  row = -1;
  for (int r = 0; r < diff->rowCount(); ++r)
    if (diff->item(r, 0)->text() == ComparePage::kPlannedStateKey) row = r;
  ASSERT_GE(row, 0);
  EXPECT_EQ(diff->item(row, 2)->text(), "34 of 34 blocks");
}

}  // namespace
}  // namespace spillway::ui

// The app on several GPUs (issue 23, point 5): New run's GPUs control writes placement.devices as
// DeviceSelection::to_json does and restores a loaded job's choice; without a usable GPU it is
// disabled and says why; Live draws each GPU's HBM and utilisation from the samples' "gpus";
// History and Compare show the GPUs each run's plan trained on. The GPU probe's answer is a fake
// machine (the probe itself is tested in ui-test.cpp and the worker's in bench-command-test.cpp);
// plans are the engine's Plan written by its own to_json (events/plan.h).
#include <gtest/gtest.h>

#include <QCheckBox>
#include <QComboBox>
#include <QLabel>
#include <QTableWidget>
#include <QTest>
#include <filesystem>
#include <fstream>

#include "ComparePage.h"
#include "GpuProbe.h"
#include "JobForm.h"
#include "JobSettings.h"
#include "LivePage.h"
#include "PlacementForm.h"
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
using nlohmann::json;
using spillway::testing::TempDir;

// A machine with `n` H100s (CUDA indices 0..n-1), as `spillway-worker probe --gpu` lists them.
GpuProbe::AnswerFn machineWith(int n) {
  return [n] {
    GpuProbe::Answer a;
    for (int i = 0; i < n; ++i) {
      GpuProbe::Device d;
      d.index = i;
      d.name = "NVIDIA H100 80GB HBM3";
      d.totalBytes = 85'000'000'000;
      d.computeCapability = 90;
      d.pciBusId = QString("0000:%1:00.0").arg(i + 1, 2, 10, QChar('0'));
      if (i == 1) d.attention = "cuDNN 9.19.0";  // the worker says what runs attention
      a.gpus << d;
    }
    a.usable = n > 0;
    if (n > 0)
      a.device = a.gpus[0];
    else
      a.why = "no CUDA-capable device is detected";
    return a;
  };
}

// The form once its probe has answered.
bool probed(const PlacementForm& form) {
  for (int waited = 0; waited < 10000 && !form.gpuProbe()->done(); waited += 10) QTest::qWait(10);
  return form.gpuProbe()->done();
}

QCheckBox* gpuBox(const PlacementForm& form, int index) {
  return form.findChild<QCheckBox*>(QString("gpu%1").arg(index));
}

// placement.devices of the job the form writes.
json devicesOf(const PlacementForm& form) {
  JobSettings s;
  form.readInto(&s);
  return s.toJson()["placement"]["devices"];
}

// The worker's "gpus" as the GUI reads them: a stand-in worker that prints what
// `spillway-worker probe --gpu --json` prints on a machine whose second GPU is too old.
TEST(GpusControl, TheProbeReadsEveryGpuTheWorkerLists) {
  TempDir tmp;
  const std::string worker = tmp.path() + "/spillway-worker";
  {
    std::ofstream f(worker);
    f << "#!/bin/sh\n"
      << R"(echo '{"usable":true,"name":"NVIDIA H100 80GB HBM3","total_bytes":85000000000,)"
      << R"("compute_capability":90,"pci_bus_id":"0000:01:00.0","gpus":[{"index":0,"usable":true,)"
      << R"("name":"NVIDIA H100 80GB HBM3","total_bytes":85000000000,"compute_capability":90,)"
      << R"("pci_bus_id":"0000:01:00.0","attention":"cuDNN 9.19.0"},)"
      << R"({"index":1,"usable":false,"why":"sm_75 is older than )"
      << R"(sm_80"}]}')"
      << "\n";
  }
  fs::permissions(worker, fs::perms::owner_all);
  GpuProbe::Device device;
  QString why;
  QVector<GpuProbe::Device> gpus;
  ASSERT_TRUE(GpuProbe::askWorker(q(worker), &device, &why, &gpus)) << why.toStdString();
  ASSERT_EQ(gpus.size(), 2);
  EXPECT_EQ(gpus[0].index, 0);
  EXPECT_EQ(gpus[0].name, "NVIDIA H100 80GB HBM3");
  EXPECT_EQ(gpus[0].totalBytes, 85'000'000'000);
  EXPECT_EQ(gpus[0].computeCapability, 90);
  EXPECT_EQ(gpus[0].pciBusId, "0000:01:00.0");
  EXPECT_EQ(gpus[0].attention, "cuDNN 9.19.0");
  EXPECT_TRUE(gpus[0].usable);
  EXPECT_EQ(gpus[1].index, 1);
  EXPECT_FALSE(gpus[1].usable);
  EXPECT_EQ(gpus[1].why, "sm_75 is older than sm_80");
}

TEST(GpusControl, ListsTheMachinesGpusAndWritesOneByDefault) {
  PlacementForm form(machineWith(2), nullptr);
  ASSERT_TRUE(probed(form));
  QCheckBox* gpu0 = gpuBox(form, 0);
  QCheckBox* gpu1 = gpuBox(form, 1);
  ASSERT_NE(gpu0, nullptr);
  ASSERT_NE(gpu1, nullptr);
  EXPECT_EQ(gpu0->text(), "GPU 0 · NVIDIA H100 80GB HBM3 · 85.0 GB");
  EXPECT_EQ(gpu0->property(JobForm::kKeyProperty).toString(), "placement.devices");
  EXPECT_TRUE(
      gpu0->toolTip().startsWith("GPU 0 · sm_90 · PCI 0000:01:00.0\n\nThe GPUs to train on"))
      << gpu0->toolTip().toStdString();
  EXPECT_TRUE(gpu1->toolTip().startsWith(
      "GPU 1 · sm_90 · PCI 0000:02:00.0\nattention on cuDNN 9.19.0\n\nThe GPUs to train on"))
      << gpu1->toolTip().toStdString();
  EXPECT_TRUE(gpu0->isEnabled());
  // The schema's default: one GPU, the first.
  EXPECT_TRUE(gpu0->isChecked());
  EXPECT_FALSE(gpu1->isChecked());
  EXPECT_FALSE(form.findChild<QCheckBox*>("allGpus")->isChecked());
  EXPECT_EQ(devicesOf(form), json(1));
}

TEST(GpusControl, ChoosingGpusWritesTheirCountOrIndicesAndAllGpus) {
  PlacementForm form(machineWith(3), nullptr);
  ASSERT_TRUE(probed(form));
  int changes = 0;
  QObject::connect(&form, &PlacementForm::changed, [&changes] { ++changes; });
  gpuBox(form, 1)->click();
  EXPECT_TRUE(gpuBox(form, 1)->isChecked());
  EXPECT_EQ(devicesOf(form), json(2));  // GPUs 0 and 1: the first two, a count
  EXPECT_EQ(changes, 1);                // a plan made before no longer holds
  gpuBox(form, 0)->click();
  EXPECT_EQ(devicesOf(form), json::array({1}));
  gpuBox(form, 2)->click();
  EXPECT_EQ(devicesOf(form), json::array({1, 2}));
  // The last GPU cannot be taken off: a run needs one.
  gpuBox(form, 1)->click();
  gpuBox(form, 2)->click();
  EXPECT_TRUE(gpuBox(form, 2)->isChecked());
  EXPECT_EQ(devicesOf(form), json::array({2}));
  // All GPUs: every box checked and held; off again, back to the default.
  auto* all = form.findChild<QCheckBox*>("allGpus");
  all->click();
  EXPECT_EQ(devicesOf(form), json("all"));
  for (int i = 0; i < 3; ++i) {
    EXPECT_TRUE(gpuBox(form, i)->isChecked()) << i;
    EXPECT_FALSE(gpuBox(form, i)->isEnabled()) << i;
  }
  all->click();
  EXPECT_EQ(devicesOf(form), json(1));
  EXPECT_TRUE(gpuBox(form, 1)->isEnabled());
}

TEST(GpusControl, ALoadedJobShowsItsGpus) {
  PlacementForm form(machineWith(2), nullptr);
  ASSERT_TRUE(probed(form));
  const JobSettings loaded = JobSettings::fromJson(
      json::parse(R"({"name":"dp","placement":{"devices":[1],"backend":"cuda"}})"));
  EXPECT_EQ(loaded.devices.indices, std::vector<int>{1});
  form.fill(loaded);
  EXPECT_FALSE(gpuBox(form, 0)->isChecked());
  EXPECT_TRUE(gpuBox(form, 1)->isChecked());
  EXPECT_EQ(devicesOf(form), json::array({1}));
  // "all" and a count come back as they were written.
  form.fill(JobSettings::fromJson(json::parse(R"({"placement":{"devices":"all"}})")));
  EXPECT_TRUE(form.findChild<QCheckBox*>("allGpus")->isChecked());
  EXPECT_EQ(devicesOf(form), json("all"));
  form.fill(JobSettings::fromJson(json::parse(R"({"placement":{"devices":2}})")));
  EXPECT_TRUE(gpuBox(form, 0)->isChecked() && gpuBox(form, 1)->isChecked());
  EXPECT_EQ(devicesOf(form), json(2));
  // A job made on a larger machine: its GPU 5 is shown, checked, and can be taken off.
  form.fill(JobSettings::fromJson(json::parse(R"({"placement":{"devices":[0,5]}})")));
  QCheckBox* gpu5 = gpuBox(form, 5);
  ASSERT_NE(gpu5, nullptr);
  EXPECT_TRUE(gpu5->isChecked());
  EXPECT_TRUE(gpu5->text().endsWith("not usable")) << gpu5->text().toStdString();
  EXPECT_TRUE(gpu5->toolTip().startsWith("GPU 5 cannot be used: this machine has no GPU 5"));
  gpu5->click();
  EXPECT_EQ(devicesOf(form), json(1));
}

TEST(GpusControl, WithoutAUsableGpuItIsDisabledAndSaysWhy) {
  PlacementForm form(machineWith(0), nullptr);
  ASSERT_TRUE(probed(form));
  auto* all = form.findChild<QCheckBox*>("allGpus");
  EXPECT_FALSE(all->isEnabled());
  EXPECT_TRUE(all->toolTip().startsWith(
      "This machine has no usable GPU (no CUDA-capable device is detected): the run trains on "
      "the CPU."))
      << all->toolTip().toStdString();
  EXPECT_EQ(gpuBox(form, 0), nullptr);
  EXPECT_EQ(form.findChild<QLabel*>("gpusHint")->text(),
            "No usable GPU on this machine: the run trains on the CPU.");
  EXPECT_EQ(devicesOf(form), json(1));

  // With GPUs, the CPU backend disables it too.
  PlacementForm gpus(machineWith(2), nullptr);
  ASSERT_TRUE(probed(gpus));
  gpus.findChild<QComboBox*>()->setCurrentText("cpu");
  EXPECT_FALSE(gpus.findChild<QCheckBox*>("allGpus")->isEnabled());
  EXPECT_FALSE(gpuBox(gpus, 1)->isEnabled());
  gpus.findChild<QComboBox*>()->setCurrentText("auto");
  EXPECT_TRUE(gpuBox(gpus, 1)->isEnabled());
}

TEST(GpusLive, EachGpuHasAnHbmAndAUtilisationLine) {
  TempDir run;
  {
    std::ofstream f(run.path() + "/events.jsonl");
    for (int i = 1; i <= 3; ++i)
      f << R"({"type":"sample","t":)" << i
        << R"(,"tiers":{"hbm":{"weights_bytes":4e9}},"links":{"h2d_gbps":40,"d2h_gbps":20},)"
        << R"("gpu_util_pct":80,"gpu_mem_used_bytes":3e10,"gpu_mem_total_bytes":1.7e11,)"
        << R"("pcie_rx_gbps":40,"pcie_tx_gbps":20,"gpus":[)"
        << R"({"index":0,"hbm_used_bytes":2e10,"hbm_total_bytes":8.5e10,"util_percent":90},)"
        << R"({"index":1,"hbm_used_bytes":1e10,"hbm_total_bytes":8.5e10,"util_percent":70},)"
        << R"({"index":100000,"hbm_used_bytes":1,"util_percent":1}]})"  // damaged: not a GPU
        << "\n";
  }
  LivePage live;
  live.attach(q(run.path()), 12345);
  const RunSeries& s = live.series();
  ASSERT_EQ(s.gpuHbmBytes.size(), 2);
  EXPECT_DOUBLE_EQ(s.gpuHbmBytes[1].lastY(), 1e10);
  EXPECT_DOUBLE_EQ(s.gpuBusyPct[0].lastY(), 90);
  TierChart* hbm = nullptr;
  for (TierChart* c : live.findChildren<TierChart*>())
    if (c->tier() == "hbm") hbm = c;
  ASSERT_NE(hbm, nullptr);
  EXPECT_EQ(hbm->gpuLines(), (QStringList{"GPU 0", "GPU 1"}));
  EXPECT_TRUE(hbm->measuredShown());  // the host's sum over them
  EXPECT_EQ(live.gpuBusyLegend(), (QStringList{"GPU 0 busy 90%", "GPU 1 busy 70%"}));
  EXPECT_EQ(live.gpuLegend(), "GPUs busy 80% (mean)");
  // The host's link totals, as for one GPU.
  EXPECT_DOUBLE_EQ(s.pcieGbps["rx"].lastY(), 40);

  // One GPU's run (its one entry in "gpus"): no per-GPU lines, the chart as it always was.
  TempDir one;
  {
    std::ofstream f(one.path() + "/events.jsonl");
    f << R"({"type":"sample","t":1,"tiers":{"hbm":{"weights_bytes":4e9}},"gpu_util_pct":90,)"
      << R"("gpu_mem_used_bytes":2e10,"gpus":[{"index":0,"hbm_used_bytes":2e10,"util_percent":90}]})"
      << "\n";
  }
  live.attach(q(one.path()), 12345);
  EXPECT_TRUE(hbm->gpuLines().isEmpty());
  EXPECT_TRUE(live.gpuBusyLegend().isEmpty());
  EXPECT_EQ(live.gpuLegend(), "GPU busy 90%");
}

// A completed run in `store` whose runs.db holds `plan` (none when null) as its plan event.
std::string addRun(RunStore& store, const std::string& root, const std::string& name,
                   const std::optional<json>& plan) {
  return addCompletedRun(store, root, name, R"({"placement":{"devices":2}})", plan,
                         /*in_store=*/true);
}

// A plan as the worker writes it, on `indices` (empty: a plan written before "devices") of each
// of `machines`.
json planOn(const std::vector<int>& indices, int machines = 1) {
  Plan p;
  p.fits = true;
  p.backend = "cuda";
  p.devices.count = static_cast<int>(std::max<size_t>(1, indices.size()));
  p.devices.indices = indices;
  p.devices.machines = machines;
  json j = to_json(p);
  if (indices.empty()) j.erase("devices");
  return j;
}

TEST(GpusHistory, HistoryAndCompareShowTheGpusEachRunUsed) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string two, old, third, none, machines;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    two = addRun(**store, tmp.path(), "two", planOn({0, 1}));
    old = addRun(**store, tmp.path(), "old", planOn({}));
    third = addRun(**store, tmp.path(), "third", planOn({2}));
    none = addRun(**store, tmp.path(), "none", std::nullopt);
    machines = addRun(**store, tmp.path(), "machines", planOn({0, 1}, 4));
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  EXPECT_EQ(model.headerData(RunHistoryModel::kDevices, Qt::Horizontal, Qt::DisplayRole), "GPUs");
  auto cell = [&](const std::string& id, int role) {
    return model.data(model.index(model.rowOfRun(q(id)), RunHistoryModel::kDevices), role);
  };
  EXPECT_EQ(cell(two, Qt::DisplayRole).toString(), "2 (0, 1)");
  EXPECT_EQ(cell(old, Qt::DisplayRole).toString(), "1");  // a plan from before data parallel
  EXPECT_EQ(cell(third, Qt::DisplayRole).toString(), "1 (2)");
  EXPECT_EQ(cell(none, Qt::DisplayRole).toString(), "—");
  EXPECT_EQ(cell(machines, Qt::DisplayRole).toString(), "2 (0, 1) × 4 machines");
  EXPECT_EQ(cell(two, Qt::UserRole).toInt(), 2);       // sorts by the count
  EXPECT_EQ(cell(machines, Qt::UserRole).toInt(), 8);  // every GPU of every machine
  EXPECT_EQ(cell(none, Qt::UserRole).toInt(), -1);
  // The columns after it kept their places.
  EXPECT_EQ(model.headerData(RunHistoryModel::kTags, Qt::Horizontal, Qt::DisplayRole), "Tags");
  EXPECT_EQ(model.headerData(RunHistoryModel::kNotes, Qt::Horizontal, Qt::DisplayRole), "Notes");

  ComparePage page(&model);
  page.setRuns({q(two), q(old), q(none)});
  ASSERT_TRUE(waitForCompare(&page));
  QTableWidget* diff = page.diffTable();
  int row = -1, jobRow = -1;
  for (int r = 0; r < diff->rowCount(); ++r) {
    if (diff->item(r, 0)->text() == ComparePage::kPlannedDevicesKey) row = r;
    if (diff->item(r, 0)->text() == "placement.devices") jobRow = r;
  }
  ASSERT_GE(row, 0);
  EXPECT_EQ(diff->item(row, 1)->text(), "2 (0, 1)");
  EXPECT_EQ(diff->item(row, 2)->text(), "1");
  EXPECT_EQ(diff->item(row, 3)->text(), "—");
  if (jobRow >= 0) EXPECT_EQ(row, jobRow + 1);  // beside the job's own key
}

}  // namespace
}  // namespace spillway::ui

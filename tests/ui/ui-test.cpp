// The desktop app's page logic: model validation messages, dataset preview, plan display, events
// parsed into chart series, the history model over a test database, the compare diff.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <linux/fs.h>
#include <qcustomplot.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <QComboBox>
#include <QDeadlineTimer>
#include <QFile>
#include <QImage>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLabel>
#include <QLineEdit>
#include <QLocale>
#include <QPlainTextEdit>
#include <QProgressBar>
#include <QPushButton>
#include <QSignalSpy>
#include <QSlider>
#include <QSpinBox>
#include <QTableWidget>
#include <QTest>
#include <QThread>
#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "ComparePage.h"
#include "ConfigDiff.h"
#include "DatasetPreview.h"
#include "EventTail.h"
#include "Format.h"
#include "GpuProbe.h"
#include "HistoryPage.h"
#include "JobSettings.h"
#include "LivePage.h"
#include "ModelInfo.h"
#include "NewRunPage.h"
#include "PlanPanel.h"
#include "PlanResult.h"
#include "PlanView.h"
#include "RunHistoryModel.h"
#include "RunSeries.h"
#include "TierChart.h"
#include "TimelineView.h"
#include "WorkerClient.h"
#include "core/file-util.h"
#include "history-wait.h"
#include "history/sqlite-util.h"
#include "immutable-flag.h"
#include "test-data.h"
#include "ui-test-util.h"

namespace spillway::ui {
namespace {
namespace fs = std::filesystem;
using spillway::testing::data_path;
using spillway::testing::TempDir;

TEST(ModelInfo, RealModelAndClearMessages) {
  SPILLWAY_REQUIRE_DATA();
  ModelInfo m = ModelInfo::inspect(q(data_path("models/stories260K")));
  ASSERT_TRUE(m.ok) << m.error.toStdString();
  EXPECT_EQ(m.architecture, "LlamaForCausalLM");
  EXPECT_EQ(m.parameters, 260032);
  EXPECT_EQ(m.layers, 5);
  EXPECT_EQ(m.hiddenSize, 64);
  EXPECT_EQ(m.vocabSize, 512);
  EXPECT_EQ(m.dtype, "F32");
  EXPECT_TRUE(m.summary().contains("260.0 k parameters"));
  EXPECT_TRUE(m.summary().startsWith("Llama (LlamaForCausalLM) · ")) << m.summary().toStdString();

  EXPECT_TRUE(ModelInfo::inspect("/no/such/folder").error.contains("is not a folder"));
  EXPECT_TRUE(ModelInfo::inspect(q(data_path("datasets/alpaca"))).error.contains("config.json"));

  TempDir dir;
  fs::copy(data_path("models/stories260K"), dir.path(), fs::copy_options::recursive);
  fs::resize_file(dir.path() + "/model.safetensors", 100000);
  ModelInfo truncated = ModelInfo::inspect(q(dir.path()));
  EXPECT_FALSE(truncated.ok);
  EXPECT_TRUE(truncated.error.contains("truncated")) << truncated.error.toStdString();

  std::ofstream(dir.path() + "/config.json")
      << R"({"architectures": ["GPT2LMHeadModel"], "vocab_size": 10})";
  ModelInfo gpt2 = ModelInfo::inspect(q(dir.path()));
  EXPECT_TRUE(gpt2.error.contains("GPT2LMHeadModel") && gpt2.error.contains("Qwen2ForCausalLM"))
      << gpt2.error.toStdString();
}

// New run's model line for a Gemma 3 text folder (the repository's golden gemma3-tiny), and the
// multimodal Gemma 3 refused with the reason.
TEST(ModelInfo, Gemma3TextAndTheMultimodalOneRefused) {
  const std::string folder = std::string(SPILLWAY_SOURCE_DIR) + "/tests/golden/gemma3-tiny/model";
  ModelInfo m = ModelInfo::inspect(q(folder));
  ASSERT_TRUE(m.ok) << m.error.toStdString();
  EXPECT_EQ(m.architecture, "Gemma3ForCausalLM");
  EXPECT_EQ(m.modelType, "gemma3_text");
  EXPECT_EQ(m.family, "Gemma 3");
  EXPECT_EQ(m.parameters, 176032);  // transformers' num_parameters(), the head tied
  EXPECT_TRUE(m.summary().startsWith("Gemma 3 (Gemma3ForCausalLM) · 176.0 k parameters · 3 layers"))
      << m.summary().toStdString();

  TempDir dir;
  fs::copy(folder, dir.path(), fs::copy_options::recursive);
  std::ofstream(dir.path() + "/config.json")
      << R"({"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
             "text_config": {"hidden_size": 2560}})";
  ModelInfo multimodal = ModelInfo::inspect(q(dir.path()));
  EXPECT_FALSE(multimodal.ok);
  EXPECT_TRUE(multimodal.error.contains("multimodal") &&
              multimodal.error.contains("Gemma3ForCausalLM"))
      << multimodal.error.toStdString();
}

// The families of issue 27 name themselves on the model line: a Phi-4 folder says Phi3ForCausalLM,
// so the family comes first. The repository's golden models (tests/golden).
TEST(ModelInfo, TheModelLineNamesTheFamily) {
  const char* env = std::getenv("SPILLWAY_GOLDEN_DIR");
  const std::string golden = env && *env ? env : SPILLWAY_DEFAULT_GOLDEN_DIR;
  ModelInfo qwen3 = ModelInfo::inspect(q(golden + "/qwen3-tiny/model"));
  ASSERT_TRUE(qwen3.ok) << qwen3.error.toStdString();
  EXPECT_EQ(qwen3.family, "Qwen3");
  EXPECT_TRUE(
      qwen3.summary().startsWith("Qwen3 (Qwen3ForCausalLM) · 101.7 k parameters · 2 layers"))
      << qwen3.summary().toStdString();
  ModelInfo phi3 = ModelInfo::inspect(q(golden + "/phi3-longrope/model"));
  ASSERT_TRUE(phi3.ok) << phi3.error.toStdString();
  EXPECT_TRUE(phi3.summary().startsWith("Phi-3 / Phi-4 (Phi3ForCausalLM) · 94.5 k parameters"))
      << phi3.summary().toStdString();
}

// A job's model.init, as New run shows it: a preset or a config.json object, parsed as the worker
// parses it; one the engine refuses gives its reason, never an empty one.
TEST(ModelInfo, ModelInitFromAPresetOrAConfigAndWhyNot) {
  SPILLWAY_REQUIRE_DATA();
  ModelInfo tiny = ModelInfo::inspectInit(QJsonObject{{"init", "llama-tiny"}, {"seed", 7}});
  ASSERT_TRUE(tiny.ok) << tiny.error.toStdString();
  EXPECT_TRUE(tiny.fromInit);
  // stories260K's shape with an untied head: 260,032 + 512 x 64.
  EXPECT_EQ(tiny.parameters, 260032 + 512 * 64);
  EXPECT_EQ(tiny.summary(),
            "Created from model.init: llama-tiny · Llama (LlamaForCausalLM) · 5 layers · hidden 64 "
            "· heads 8/4 · "
            "vocabulary 512 · 292.8 k parameters · random initialisation (seed 7)");

  // A config.json object: stories260K's own config, the parameters of the folder's tensors.
  QFile config(q(data_path("models/stories260K/config.json")));
  ASSERT_TRUE(config.open(QIODevice::ReadOnly));
  const QJsonObject object = QJsonDocument::fromJson(config.readAll()).object();
  ModelInfo fromConfig = ModelInfo::inspectInit(QJsonObject{{"init", object}});
  ASSERT_TRUE(fromConfig.ok) << fromConfig.error.toStdString();
  EXPECT_EQ(fromConfig.parameters,
            ModelInfo::inspect(q(data_path("models/stories260K"))).parameters);
  EXPECT_TRUE(fromConfig.summary().startsWith(
      "Created from model.init: Llama (LlamaForCausalLM) · 5 layers"))
      << fromConfig.summary().toStdString();
  EXPECT_TRUE(fromConfig.summary().endsWith("(seed 0)"));

  QJsonObject gpt2 = object;
  gpt2["architectures"] = QJsonArray{"GPT2LMHeadModel"};
  const ModelInfo refused = ModelInfo::inspectInit(QJsonObject{{"init", gpt2}});
  EXPECT_FALSE(refused.ok);
  EXPECT_TRUE(refused.error.startsWith("model.init: ") && refused.error.contains("GPT2LMHeadModel"))
      << refused.error.toStdString();
  const ModelInfo number = ModelInfo::inspectInit(QJsonObject{{"init", 5}});
  EXPECT_FALSE(number.ok);
  EXPECT_TRUE(number.error.startsWith("model.init: expected a preset name (llama-tiny, "))
      << number.error.toStdString();
}

TEST(ModelInfo, FindsHuggingFaceCacheSnapshots) {
  TempDir hub;
  fs::create_directories(hub.path() + "/models--org--tiny/snapshots/abc123");
  std::ofstream(hub.path() + "/models--org--tiny/snapshots/abc123/config.json") << "{}";
  fs::create_directories(hub.path() + "/datasets--x/snapshots/1");
  const QStringList found = findHuggingFaceModels(q(hub.path()));
  ASSERT_EQ(found.size(), 1);
  EXPECT_TRUE(found[0].endsWith("models--org--tiny/snapshots/abc123"));
}

TEST(DatasetPreview, AlpacaWithTrainedTokensHighlighted) {
  SPILLWAY_REQUIRE_DATA();
  DatasetPreview p = DatasetPreview::load(q(data_path("datasets/alpaca/alpaca_en_demo.json")),
                                          q(data_path("models/stories260K")), 256);
  ASSERT_TRUE(p.ok) << p.error.toStdString();
  EXPECT_EQ(p.format, "alpaca");
  EXPECT_EQ(p.examples, 999);
  EXPECT_GT(p.truncated, 0);                  // some answers are longer than 256 tokens
  EXPECT_LT(p.trainedTokens, p.totalTokens);  // prompts are masked
  EXPECT_TRUE(p.previewHtml.contains("background-color:#ffe08a"));
  qint64 counted = 0;
  for (qint64 c : p.histogram) counted += c;
  EXPECT_EQ(counted, 999);
}

TEST(DatasetPreview, BadLineNamesFileAndLine) {
  SPILLWAY_REQUIRE_DATA();
  TempDir dir;
  std::ofstream(dir.path() + "/bad.jsonl") << "{\"text\": \"ok\"}\n{\"text\": 3}\n";
  DatasetPreview p =
      DatasetPreview::load(q(dir.path() + "/bad.jsonl"), q(data_path("models/stories260K")), 64);
  EXPECT_FALSE(p.ok);
  EXPECT_TRUE(p.error.contains("bad.jsonl:2")) << p.error.toStdString();
}

const char* kPlan =
    R"({"fits": false, "reason": "DRAM: needs 900.00 GB but 120.00 GB is available; set placement.optimizer to \"ssd\"",
  "tiers": {"hbm": {"needed_bytes": 2e10, "free_bytes": 8e10, "total_bytes": 8e10},
            "dram": {"needed_bytes": 9e11, "free_bytes": 1.2e11, "total_bytes": 1.3e11},
            "ssd": {"needed_bytes": 0, "free_bytes": 5e11, "total_bytes": 1e12}},
  "step": {"step_s": 12.5, "tokens_per_s": 1310.7, "eta_s": 3600, "bottleneck": "optimizer"}})";

TEST(PlanView, ShowsTiersAndWhatToChange) {
  PlanResult r = PlanResult::fromJson(QJsonDocument::fromJson(kPlan).object());
  ASSERT_TRUE(r.ok);
  EXPECT_FALSE(r.fits);
  ASSERT_EQ(r.tiers.size(), 3);
  EXPECT_FALSE(r.tiers[1].fits());
  EXPECT_TRUE(r.tiers[0].fits());
  EXPECT_EQ(r.bottleneck, "optimizer");
  PlanView view;
  view.setPlan(r);
  EXPECT_TRUE(view.tierText(1).contains("needs 900.0 GB")) << view.tierText(1).toStdString();
  EXPECT_TRUE(view.tierText(0).contains("free 80.0 GB"));
  // It does not fit: no step time or ETA to promise (there was "ETA 228 h" beside the red reason).
  EXPECT_EQ(r.summary(), "Does not fit (below): no step time or ETA.");
  // A worker failure is shown as its message.
  PlanResult failed = PlanResult::fromWorkerOutput(
      R"({"error":"invalid_argument","message":"job.json: unknown key train.x"})", "", 2);
  EXPECT_FALSE(failed.ok);
  EXPECT_EQ(failed.error, "job.json: unknown key train.x");
  EXPECT_TRUE(r.measured.isEmpty());

  // plan --measure: the plan, and each measured figure against it, null shown as absent.
  const QByteArray measured =
      "{\"steps\": 3, \"plan\": " + QByteArray(kPlan) +
      R"(, "versus_plan": {"step_s": {"predicted": 12.5, "measured": 13.0, "ratio": 1.04},
          "tokens_per_s": {"predicted": 1310.7, "measured": 1260.3, "ratio": 0.9615},
          "peak_hbm_bytes": {"predicted": null, "measured": null, "ratio": null},
          "peak_dram_bytes": {"predicted": 9e11, "measured": 8.1e11, "ratio": 0.9},
          "h2d_bytes": {"predicted": 2.6e10, "measured": 3.9e10, "ratio": 1.5},
          "d2h_bytes": {"predicted": 1.3e10, "measured": 1.3e10, "ratio": 1.0}}})";
  PlanResult m = PlanResult::fromWorkerOutput(measured.simplified(), "", 0);
  ASSERT_TRUE(m.ok);
  EXPECT_EQ(m.bottleneck, "optimizer");
  EXPECT_EQ(m.measuredSteps, 3);
  ASSERT_EQ(m.measured.size(), 6);
  EXPECT_EQ(m.measured[0].key, "step_s");
  EXPECT_EQ(m.measured[0].predictedText(), "12.5 s");
  EXPECT_EQ(m.measured[0].measuredText(), "13.0 s");
  EXPECT_EQ(m.measured[0].ratioText(), "1.04×");
  EXPECT_FALSE(m.measured[0].offPlan());
  EXPECT_EQ(m.measured[1].measuredText(), QLocale().toString(1260.3, 'f', 0));
  EXPECT_EQ(m.measured[2].key, "peak_hbm_bytes");  // the CPU backend has no HBM: absent, not 0
  EXPECT_TRUE(qIsNaN(m.measured[2].measured));
  EXPECT_EQ(m.measured[2].measuredText(), "—");
  EXPECT_EQ(m.measured[2].ratioText(), "—");
  EXPECT_FALSE(m.measured[2].offPlan());
  EXPECT_EQ(m.measured[3].measuredText(), "810.0 GB");
  EXPECT_FALSE(m.measured[3].offPlan());  // 0.90: on the edge of ±10%, not past it
  // Link bytes per step, and the rate they ask of the link over the step.
  EXPECT_EQ(m.measured[4].predictedText(), "26.0 GB (2.08 GB/s)");
  EXPECT_EQ(m.measured[4].measuredText(), "39.0 GB (3.00 GB/s)");
  EXPECT_TRUE(m.measured[4].offPlan());
  view.setPlan(m);
  QTableWidget* table = view.measuredTable();
  ASSERT_TRUE(table);
  EXPECT_EQ(table, view.findChild<QTableWidget*>("measuredTable"));
  EXPECT_TRUE(table->isVisibleTo(&view));
  ASSERT_EQ(table->rowCount(), 6);
  ASSERT_EQ(table->columnCount(), 3);
  EXPECT_EQ(table->verticalHeaderItem(0)->text(), "Step time");
  EXPECT_EQ(table->item(0, 0)->text(), "12.5 s");
  EXPECT_EQ(table->item(0, 1)->text(), "13.0 s");
  EXPECT_EQ(table->item(0, 2)->text(), "1.04×");
  EXPECT_EQ(table->item(2, 1)->text(), "—");
  // Off the plan by more than 10%: marked, bold, red, by how much in the tooltip; the others not.
  QTableWidgetItem* h2d = table->item(4, 2);
  EXPECT_EQ(h2d->text(), "⚠ 1.50×");
  EXPECT_TRUE(h2d->data(Qt::UserRole).toBool());
  EXPECT_TRUE(h2d->font().bold());
  EXPECT_EQ(h2d->foreground().color(), QColor("#d32f2f"));
  EXPECT_TRUE(h2d->toolTip().startsWith("50% more than planned")) << h2d->toolTip().toStdString();
  for (int row : {0, 1, 2, 3, 5}) {
    EXPECT_FALSE(table->item(row, 2)->data(Qt::UserRole).toBool()) << row;
    EXPECT_FALSE(table->item(row, 2)->font().bold()) << row;
  }
  // Every row shown without a scroll bar of the table's own.
  EXPECT_GE(table->height(), table->rowHeight(0) * 6);
  view.setPlan(r);
  EXPECT_FALSE(table->isVisibleTo(&view));
  // A busy view hides the table of an earlier form; a stop says so without an error.
  view.setPlan(m);
  EXPECT_TRUE(table->isVisibleTo(&view));
  view.setBusy("Measuring");
  EXPECT_FALSE(table->isVisibleTo(&view));
  view.setNote("Stopped");
  EXPECT_TRUE(view.errorText().isEmpty());
}

TEST(EventTail, ParsesEventsIntoBoundedSeriesAcrossPartialLines) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  std::ofstream f(path);
  f << R"({"type":"state","t":0,"state":"training","run_id":"r1","total_steps":10})"
    << "\n";
  f << R"({"type":"plan","t":0.1,"fits":true,"machine":{"h2d_bytes_per_s":5e10}})"
    << "\n";
  for (int s = 1; s <= 5; ++s) {
    f << R"({"type":"step","t":)" << s << R"(,"step":)" << s << R"(,"loss":)" << 5.0 - s * 0.1
      << R"(,"lr":0.001,"grad_norm":1,"tokens":)" << s * 1024
      << R"(,"tokens_per_s":1000,"model_tflops":0.1,"step_s":1})"
      << "\n";
    f << R"({"type":"sample","t":)" << s + 0.5
      << R"(,"tiers":{"hbm":{"weights_bytes":1000,"workspace_bytes":500,"capacity_bytes":4000},"dram":{"master_bytes":2000,"total_bytes":9000}},"links":{"h2d_gbps":1.5,"d2h_gbps":0.5}})"
      << "\n";
  }
  f << R"({"type":"span","t":6,"layer":2,"block":"layer","phase":"forward","start_s":5.9,"end_s":5.95})"
    << "\n";
  f << R"({"type":"log","t":6,"level":"info","message":"hello"})"
    << "\n";
  f << R"({"type":"eval","t":6,"step":5,"loss":4.2,"perplexity":66.7})"
    << "\n";
  f << R"({"type":"step","t":7,"st)";  // a line the worker is still writing
  f.flush();
  EventTail tail(q(dir.path()));
  RunSeries s;
  EXPECT_EQ(tail.poll(s), 15);
  EXPECT_EQ(s.runId, "r1");
  EXPECT_EQ(s.totalSteps, 10);
  EXPECT_EQ(s.lastStep, 5);
  EXPECT_EQ(s.loss.size(), 5);
  EXPECT_DOUBLE_EQ(s.loss.lastY(), 4.5);
  EXPECT_EQ(s.tierBytes["hbm"]["weights"].size(), 5);
  EXPECT_DOUBLE_EQ(s.tierCapacity["hbm"], 4000);
  EXPECT_DOUBLE_EQ(s.tierCapacity["dram"], 9000);
  EXPECT_DOUBLE_EQ(s.linkGbps["h2d"].lastY(), 1.5);
  ASSERT_EQ(s.spans.size(), 1);
  EXPECT_EQ(s.spans[0].layer, 2);
  EXPECT_EQ(s.evalLoss.size(), 1);
  EXPECT_TRUE(s.log.join("\n").contains("hello"));
  f << R"(ep":6,"loss":4.4,"lr":0.001,"tokens":6144,"tokens_per_s":1000,"model_tflops":0.1,"step_s":1})"
    << "\n";
  f.flush();
  EXPECT_EQ(tail.poll(s), 1);  // the finished line, once
  EXPECT_EQ(s.lastStep, 6);
  Ring r(8);
  for (int i = 0; i < 100; ++i) r.append(i, i);
  EXPECT_LE(r.size(), 8);  // bounded
  EXPECT_DOUBLE_EQ(r.lastY(), 99);
}

TEST(LivePage, FollowsEventsShowsLinkShareAndUnavailableTiers) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  std::ofstream f(path);
  f << R"({"type":"state","t":0,"state":"training","run_id":"r1","total_steps":10})"
    << "\n";
  f << R"({"type":"plan","t":0.1,"fits":true,"machine":{"h2d_bytes_per_s":5e9}})"
    << "\n";
  f << R"({"type":"sample","t":1,"tiers":{"dram":{"master_bytes":2000,"capacity_bytes":9000}},"links":{"h2d_gbps":2.5}})"
    << "\n";
  f.flush();
  LivePage live;
  live.attach(q(dir.path()), 12345);
  EXPECT_EQ(live.series().lines, 3);
  const QStringList legend = live.linkLegend();
  ASSERT_EQ(legend.size(), 4);
  EXPECT_EQ(legend[0], "h2d 2.50 GB/s (50% of 5.0 GB/s)");  // of the plan's measured 5 GB/s
  EXPECT_EQ(legend[1], "d2h (unavailable)");                // not reported: never shown as zero
  // More lines than the log ring holds: every line reaches the log view exactly once.
  for (int i = 0; i < 2600; ++i)
    f << R"({"type":"log","t":2,"level":"info","message":"line )" << i << R"("})"
      << "\n";
  f.flush();
  // Its worker (pid 12345) is gone: what is on disk is read off the window's thread first.
  for (int i = 0; i < 5 && live.series().logTotal < 2600; ++i) {
    live.tick();
    ASSERT_TRUE(waitForLive(&live));
  }
  EXPECT_EQ(live.series().logTotal, 2600);
  EXPECT_LT(live.series().log.size(), 2600);  // bounded
  auto* log = live.findChild<QPlainTextEdit*>();
  ASSERT_NE(log, nullptr);
  EXPECT_TRUE(log->toPlainText().endsWith("line 2599"));
}

// The fault matrix's GUI row (README "What survives a fault"): an events.jsonl with damaged lines
// (garbage, NUL bytes a crash left, JSON that is not an event, a line a killed worker cut off and a
// resumed one wrote after), a cut-off last line, a line of megabytes without a newline, and a file
// replaced by a shorter one. Every event that can be read is charted; the rest are counted with
// the first one's line number, and the Live page says so in its log.
// Counts past what a qint64 holds, negative or not a number (a damaged events.jsonl; UBSan in the
// fuzz target events: "7.77778e+95 is outside the range of representable values of type 'long
// long'") read as the largest exact count or as 0.
TEST(RunSeries, CountsOutOfRangeAreClampedNotConverted) {
  RunSeries s;
  EXPECT_TRUE(s.apply(R"({"type":"state","t":0,"state":"training","total_steps":7.77778e95})"));
  EXPECT_EQ(s.totalSteps, qint64{1} << 53);
  EXPECT_TRUE(s.apply(R"({"type":"step","t":1,"step":-3,"tokens":1e300,"loss":2.5})"));
  EXPECT_EQ(s.lastStep, 0);
  EXPECT_EQ(s.tokens, qint64{1} << 53);
  EXPECT_TRUE(s.apply(R"({"type":"step","t":2,"step":4,"tokens":4096,"total_steps":10})"));
  EXPECT_EQ(s.lastStep, 4);
  EXPECT_EQ(s.tokens, 4096);
  EXPECT_EQ(s.totalSteps, 10);
}

TEST(EventTail, DamagedAndCutOffLinesAreSkippedCountedAndBounded) {
  TempDir dir;
  const std::string path = dir.path() + "/events.jsonl";
  std::ofstream f(path, std::ios::binary);
  f << R"({"type":"state","t":0,"state":"training","run_id":"r1","total_steps":10})"
    << "\n";                          // line 1
  f << "garbage\n";                   // 2
  f << std::string(8, '\0') << "\n";  // 3
  f << "[1, 2]\n";                    // 4
  f << R"({"t":1,"step":1})"
    << "\n";  // 5: no type
  f << R"({"type":"step","t":1,"step":1,"loss":4.5,"tokens":64})"
    << "\n";                          // 6
  f << R"({"type":"step","t":2,"st)"  // 7: cut off...
    << R"({"type":"state","t":2.5,"state":"training","step":1})"
    << "\n";  // ...resumed
  f << R"({"type":"step","t":3,"step":2,"loss":4.25,"tokens":128})"
    << "\n";                                    // 8
  f << R"({"type":"step","t":4,"step":3,"lo)";  // 9: killed here
  f.flush();
  EventTail tail(q(dir.path()));
  RunSeries s;
  EXPECT_EQ(tail.poll(s), 3);
  EXPECT_EQ(tail.skipped(), 5);
  EXPECT_EQ(tail.firstSkippedLine(), 2);
  EXPECT_EQ(s.lastStep, 2);
  EXPECT_EQ(s.loss.size(), 2);
  EXPECT_DOUBLE_EQ(s.loss.lastY(), 4.25);
  EXPECT_EQ(tail.finish(s), 0);  // the worker is gone: line 9 never ends
  EXPECT_EQ(tail.skipped(), 6);
  EXPECT_EQ(s.lastStep, 2);

  // 5 MiB without a newline (a disk error's garbage): dropped past kMaxLineBytes, counted once.
  const std::string junk(5 << 20, 'x');
  f << "\n" << junk.substr(0, 3 << 20);
  f.flush();
  EXPECT_EQ(tail.poll(s), 0);
  EXPECT_EQ(tail.skipped(), 6);
  f << junk.substr(3 << 20);
  f.flush();
  EXPECT_EQ(tail.poll(s), 0);
  EXPECT_EQ(tail.skipped(), 7);
  f << "\n"
    << R"({"type":"step","t":5,"step":3,"loss":4.0,"tokens":192})"
    << "\n";
  f.flush();
  EXPECT_EQ(tail.poll(s), 1);
  EXPECT_EQ(tail.skipped(), 7);
  EXPECT_EQ(s.lastStep, 3);

  // Replaced by a shorter file (a run folder reused): read from its start.
  f.close();
  std::ofstream(path, std::ios::binary | std::ios::trunc)
      << R"({"type":"step","t":1,"step":9,"loss":3.0,"tokens":64})"
      << "\n";
  EXPECT_EQ(tail.poll(s), 1);
  EXPECT_EQ(s.lastStep, 9);
}

TEST(LivePage, SaysWhenEventsJsonlHasLinesItCannotRead) {
  TempDir dir;
  {
    std::ofstream f(dir.path() + "/events.jsonl", std::ios::binary);
    f << R"({"type":"state","t":0,"state":"training","run_id":"r1","total_steps":10})"
      << "\n";
    f << "\x01\x02 not json\n";
    f << R"({"type":"step","t":1,"step":1,"loss":4.5,"tokens":64})"
      << "\n";
    f << R"({"type":"step","t":2,"step":2,"lo)";  // the worker was killed writing this
  }
  LivePage live;
  live.attach(q(dir.path()), 999999999);  // no such worker: the run has ended
  EXPECT_EQ(live.series().lastStep, 1);
  auto* log = live.findChild<QPlainTextEdit*>();
  ASSERT_NE(log, nullptr);
  EXPECT_TRUE(log->toPlainText().contains(
      "2 lines of events.jsonl could not be read (damaged, or cut off when the worker stopped) and "
      "were skipped, the first at line 2; the charts show the other lines."))
      << log->toPlainText().toStdString();
}

// The fault matrix's runs.db rows as the app reads them (README "What survives a fault"): runs.db
// locked by another process, or read-only, is still read (History lists its runs, even when the
// runs of dead workers cannot be marked interrupted), and an edit says what is wrong; a damaged
// one is named in the words the status bar shows ("Run history unavailable: ...") and left as it
// is.
TEST(RunHistoryModel, ALockedReadOnlyOrDamagedRunsDbIsReadOrSaidAndLeftAlone) {
  TempDir dir;
  const std::string db = dir.path() + "/runs.db";
  std::string done;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    RunInfo info;
    info.name = "done";
    info.status = RunStatus::kCompleted;
    done = *(*store)->create_run(info);
    RunInfo gone;  // running, its worker long gone: reconciled at the next open that can write
    gone.name = "gone";
    gone.pid = 999999999;
    ASSERT_TRUE((*store)->create_run(gone).ok());
  }
  {
    auto other = SqliteDb::open(db);  // another process's write lock, held
    ASSERT_TRUE(other.ok());
    ASSERT_TRUE(other->exec("BEGIN EXCLUSIVE").ok());
    RunHistoryModel model;
    EXPECT_EQ(model.open(q(db)), QString());
    ASSERT_TRUE(waitForHistory(&model));
    EXPECT_EQ(model.rowCount(QModelIndex()), 2);
    Status st = model.store()->rename(done, "renamed");
    EXPECT_NE(st.message().find(db + " is locked by another process"), std::string::npos)
        << st.to_string();
    ASSERT_TRUE(other->exec("ROLLBACK").ok());
  }
  {
    auto c = SqliteDb::open(db);
    ASSERT_TRUE(c.ok() && c->exec("PRAGMA wal_checkpoint(TRUNCATE)").ok());
  }
  const std::string before = *read_file(db);
  const bool root = ::geteuid() == 0;
  if (root ? testing::set_immutable(db, true)
           : (std::filesystem::permissions(db, std::filesystem::perms::owner_read), true)) {
    RunHistoryModel model;
    EXPECT_EQ(model.open(q(db)), QString());
    ASSERT_TRUE(waitForHistory(&model));
    EXPECT_EQ(model.rowCount(QModelIndex()), 2);
    Status st = model.store()->rename(done, "renamed");
    EXPECT_NE(st.message().find(db + " is read-only"), std::string::npos) << st.to_string();
    EXPECT_TRUE(*read_file(db) == before);
    if (root) testing::set_immutable(db, false);
    for (const std::string& f : {db, db + "-wal", db + "-shm"})
      if (std::filesystem::exists(f))
        std::filesystem::permissions(
            f, std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  }
  std::filesystem::remove(db + "-wal");
  std::filesystem::remove(db + "-shm");
  const std::string damaged = std::string(64, 'Z') + before.substr(64);
  ASSERT_TRUE(write_file_atomic(db, damaged).ok());
  RunHistoryModel model;
  const QString error = model.open(q(db));
  EXPECT_TRUE(error.contains(
      q(db) + " is damaged (file is not a database); Spillway leaves it as it is: move it aside"))
      << error.toStdString();
  EXPECT_TRUE(*read_file(db) == damaged);
}

TierChart* hbmChart(const LivePage& live) {
  for (TierChart* c : live.findChildren<TierChart*>())
    if (c->tier() == "hbm") return c;
  return nullptr;
}

TEST(LivePage, GpuSeriesShownWhenTheSamplesCarryGpuFieldsAndHiddenWithout) {
  TempDir gpuRun, cpuRun;
  {
    std::ofstream f(gpuRun.path() + "/events.jsonl");
    f << R"({"type":"plan","t":0.1,"fits":true,"machine":{"h2d_bytes_per_s":5.5e10,"d2h_bytes_per_s":5.3e10}})"
      << "\n";
    for (int i = 1; i <= 3; ++i)
      f << R"({"type":"sample","t":)" << i
        << R"(,"tiers":{"hbm":{"weights_bytes":2e9,"workspace_bytes":1e9}},"links":{"h2d_gbps":20,"d2h_gbps":10},)"
        << R"("gpu_util_pct":87,"gpu_mem_used_bytes":4.5e9,"gpu_mem_total_bytes":8.5e10,"pcie_tx_gbps":10.5,)"
        << R"("pcie_rx_gbps":21.25,"gpu_power_w":412.4,"gpu_temp_c":63})"
        << "\n";
  }
  {
    std::ofstream f(cpuRun.path() + "/events.jsonl");
    f << R"({"type":"sample","t":1,"tiers":{"hbm":{"weights_bytes":1000}},"links":{"h2d_gbps":2.5}})"
      << "\n";
  }

  LivePage live;
  live.attach(q(gpuRun.path()), 12345);
  const RunSeries& s = live.series();
  EXPECT_EQ(s.gpuUtilPct.size(), 3);
  EXPECT_DOUBLE_EQ(s.pcieGbps["rx"].lastY(), 21.25);
  EXPECT_DOUBLE_EQ(s.tierMeasuredBytes["hbm"].lastY(), 4.5e9);
  EXPECT_DOUBLE_EQ(s.tierCapacity["hbm"], 8.5e10);  // no declared capacity: the GPU's size
  EXPECT_TRUE(live.gpuSeriesShown());
  EXPECT_EQ(live.gpuLegend(), "GPU busy 87% · 412 W · 63 °C");
  EXPECT_TRUE(live.linkCapacityShown());
  EXPECT_EQ(live.linkLegend()[1], "d2h 10.00 GB/s (19% of 53.0 GB/s)");  // its own measured rate
  TierChart* hbm = hbmChart(live);
  ASSERT_NE(hbm, nullptr);
  EXPECT_TRUE(hbm->measuredShown());
  EXPECT_EQ(hbm->heading(), "HBM (device): 3.00 GB of 85.0 GB\n4.50 GB in use on the device")
      << hbm->heading().toStdString();

  // The same page on a run without GPU metrics: every GPU series hides again.
  live.attach(q(cpuRun.path()), 12345);
  EXPECT_TRUE(live.series().gpuUtilPct.isEmpty());
  EXPECT_FALSE(live.gpuSeriesShown());
  EXPECT_TRUE(live.gpuLegend().isEmpty());
  EXPECT_FALSE(live.linkCapacityShown());  // no plan: no measured capacity to draw
  EXPECT_FALSE(hbm->measuredShown());
}

TEST(GpuProbe, ProbesOffTheGuiThreadAndSaysWhatItFound) {
  Qt::HANDLE probedOn = nullptr;
  GpuProbe found(
      [&probedOn](GpuProbe::Device* device, QString*) {
        probedOn = QThread::currentThreadId();
        device->name = "NVIDIA H100 80GB HBM3";
        device->totalBytes = 85'031'714'816ll;
        device->computeCapability = 90;
        return true;
      },
      nullptr);
  QSignalSpy spy(&found, &GpuProbe::finished);
  found.start();
  EXPECT_EQ(found.text(), "probing GPU…");
  ASSERT_TRUE(spy.wait(10000));
  EXPECT_NE(probedOn, QThread::currentThreadId());
  EXPECT_TRUE(found.answer().usable);
  EXPECT_EQ(spy.takeFirst().at(0).toString(), "NVIDIA H100 80GB HBM3 · 85.0 GB · sm_90");

  GpuProbe none(
      [](GpuProbe::Device*, QString* why) {
        *why = "cpu: no CUDA backend module (libspillway-cuda.so not found)";
        return false;
      },
      nullptr);
  QSignalSpy noneSpy(&none, &GpuProbe::finished);
  none.start();
  ASSERT_TRUE(noneSpy.wait(10000));
  EXPECT_EQ(none.text(),
            "no usable GPU: cpu: no CUDA backend module (libspillway-cuda.so not found)");
}

// The real probe asks the worker next to the app while the GUI thread looks the worker up too:
// the path is found on the GUI thread when the probe starts, because WorkerClient::workerPath reads
// QCoreApplication::applicationDirPath, whose caches Qt fills without a lock (the pool thread
// called it before; a race inside the uninstrumented Qt, which TSan cannot report, so this test
// checks the answer and that the GUI thread's lookups go on meanwhile).
TEST(GpuProbe, AsksTheWorkerNextToTheAppWhileTheGuiThreadLooksItUp) {
  const QByteArray env = qgetenv("SPILLWAY_WORKER");
  qunsetenv("SPILLWAY_WORKER");
  const QString worker = WorkerClient::workerPath();
  if (worker.isEmpty()) {
    if (!env.isNull()) qputenv("SPILLWAY_WORKER", env);
    GTEST_SKIP() << "no spillway-worker next to the test binary";
  }
  GpuProbe probe(nullptr);
  QSignalSpy spy(&probe, &GpuProbe::finished);
  probe.start();
  QDeadlineTimer deadline(static_cast<qint64>(60000 * spillway::testing::kTimeScale));
  while (!probe.done() && !deadline.hasExpired()) {
    EXPECT_EQ(WorkerClient::workerPath(), worker);
    spy.wait(10);
  }
  if (!env.isNull()) qputenv("SPILLWAY_WORKER", env);
  ASSERT_TRUE(probe.done());
  // Usable or not, the answer is the worker's: a GPU's name, or why there is none.
  if (probe.answer().usable) {
    EXPECT_FALSE(probe.answer().device.name.isEmpty());
  } else {
    EXPECT_FALSE(probe.answer().why.isEmpty());
    EXPECT_NE(probe.answer().why, "spillway-worker was not found next to the app or on PATH");
    EXPECT_FALSE(probe.answer().why.startsWith("spillway-worker probe --gpu"))
        << probe.answer().why.toStdString();  // it answered, in JSON
  }
  GpuProbe::Device device;
  QString why;
  EXPECT_FALSE(GpuProbe::askWorker(QString(), &device, &why));
  EXPECT_EQ(why, "spillway-worker was not found next to the app or on PATH");
}

// A measure's worker killed before it cleaned up leaves its throwaway run in the TMPDIR the panel
// gave it: when the plan ends, the panel removes the run's own files there and leaves anything
// else (here a file of another program's beside them) where it is. It used to remove the whole
// folder.
TEST(PlanPanel, RemovesOnlyWhatAMeasureLeftOfItsThrowawayRun) {
  TempDir tmp;
  const std::string record = tmp.path() + "/tmpdir";
  const std::string worker = tmp.path() + "/fake-worker";
  std::ofstream(worker) << "#!/bin/sh\n"
                        << "run=\"$TMPDIR/spillway-measure.abc123\"\n"
                        << "mkdir -p \"$run/run/checkpoints\"\n"
                        << "echo db > \"$run/runs.db\"; echo e > \"$run/run/events.jsonl\"\n"
                        << "echo other > \"$TMPDIR/other-program.tmp\"\n"
                        << "echo \"$TMPDIR\" > '" << record << "'\n"  // a TMPDIR with a space
                        << "echo '{\"error\": \"internal\", \"message\": \"killed\"}'; exit 1\n";
  ::chmod(worker.c_str(), 0755);
  qputenv("SPILLWAY_WORKER", QByteArray::fromStdString(worker));
  QString planDir;
  {
    PlanPanel panel;
    panel.setJobSource([](JobSettings* job, QString*) {
      *job = JobSettings();
      return true;
    });
    QSignalSpy planned(&panel, &PlanPanel::planned);
    panel.measure();
    ASSERT_TRUE(planned.wait(30000));
    std::ifstream in(record);
    std::string dir;
    std::getline(in, dir);
    ASSERT_FALSE(dir.empty());
    const QString workerTmp = QString::fromStdString(dir);
    planDir = QFileInfo(workerTmp).absolutePath();
    EXPECT_EQ(QFileInfo(workerTmp).fileName(), "worker-tmp-1");
    // The removal runs off the window's thread: wait for it.
    for (int waited = 0;
         waited < 30000 && QFileInfo::exists(workerTmp + "/spillway-measure.abc123"); waited += 20)
      QTest::qWait(20);
    EXPECT_FALSE(QFileInfo::exists(workerTmp + "/spillway-measure.abc123"));
    QFile other(workerTmp + "/other-program.tmp");
    ASSERT_TRUE(other.open(QIODevice::ReadOnly));
    EXPECT_EQ(other.readAll(), "other\n");
  }
  qunsetenv("SPILLWAY_WORKER");
  // The panel is gone: its job file with it, its folder kept for the file that is not its own.
  EXPECT_FALSE(QFileInfo::exists(planDir + "/job.json"));
  EXPECT_TRUE(QFileInfo::exists(planDir + "/worker-tmp-1/other-program.tmp"));
  QDir(planDir).removeRecursively();  // the test's own clean-up
}

TEST(NewRunPage, OffersCudaAndShowsTheGpuProbe) {
  NewRunPage page;
  QComboBox* backend = nullptr;
  for (QComboBox* c : page.findChildren<QComboBox*>())
    if (c->findText("cuda") >= 0) backend = c;
  ASSERT_NE(backend, nullptr);
  EXPECT_EQ(backend->count(), 3);
  EXPECT_EQ(backend->itemText(0), "auto");
  EXPECT_EQ(backend->itemText(1), "cpu");
  QLabel* label = nullptr;
  for (QLabel* l : page.findChildren<QLabel*>())
    if (l->text() == breakablePaths(page.gpuProbe()->text())) label = l;
  ASSERT_NE(label, nullptr);
  for (int waited = 0; waited < 30000 && !page.gpuProbe()->done(); waited += 50) QTest::qWait(50);
  ASSERT_TRUE(page.gpuProbe()->done());
  // This machine's answer, whatever it is: a GPU's name, or why there is none (a path in it may
  // break after each '/').
  EXPECT_EQ(label->text(), breakablePaths(page.gpuProbe()->text()));
  EXPECT_EQ(label->text().remove(QChar(0x200B)), page.gpuProbe()->text());
  if (!page.gpuProbe()->answer().usable) {
    EXPECT_TRUE(label->text().startsWith("no usable GPU: ")) << label->text().toStdString();
  }
}

// Types `text` over what the field holds, as a person would.
void retype(QWidget* field, const QString& text) {
  field->setFocus();
  QTest::keyClick(field, Qt::Key_A, Qt::ControlModifier);
  QTest::keyClick(field, Qt::Key_Delete);
  QTest::keyClicks(field, text);
}

TEST(NewRunPage, LearningRateTakesScientificNotationAndDecimals) {
  NewRunPage page;
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  auto* lr = page.findChild<QLineEdit*>("learningRate");
  auto* error = page.findChild<QLabel*>("learningRateError");
  ASSERT_NE(lr, nullptr);
  ASSERT_NE(error, nullptr);
  const std::pair<const char*, double> cases[] = {
      {"3e-3", 3e-3}, {"2e-5", 2e-5}, {"0.0003", 3e-4}, {"1E-4", 1e-4}, {"10", 10.0}};
  for (const auto& [text, value] : cases) {
    retype(lr, text);
    EXPECT_DOUBLE_EQ(page.settings().lr, value) << text;
    EXPECT_FALSE(error->isVisible()) << text;
    EXPECT_TRUE(page.inputError().isEmpty()) << text;
  }
  // The value round-trips through the job settings unchanged.
  JobSettings s = page.settings();
  s.lr = 2e-5;
  page.setSettings(s);
  EXPECT_DOUBLE_EQ(page.settings().lr, 2e-5);
  EXPECT_DOUBLE_EQ(JobSettings::fromJson(page.settings().toJson()).lr, 2e-5);
  EXPECT_FALSE(error->isVisible());
}

TEST(NewRunPage, RefusesALearningRateOutsideTheWorkersRange) {
  NewRunPage page;
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  auto* lr = page.findChild<QLineEdit*>("learningRate");
  auto* error = page.findChild<QLabel*>("learningRateError");
  ASSERT_NE(lr, nullptr);
  ASSERT_NE(error, nullptr);
  QPushButton* launch = nullptr;
  for (QPushButton* b : page.findChildren<QPushButton*>())
    if (b->text() == "Launch") launch = b;
  ASSERT_NE(launch, nullptr);
  for (const char* text : {"abc", "0", "11", "-1e-4", ""}) {
    retype(lr, text);
    EXPECT_TRUE(error->isVisible()) << text;
    EXPECT_TRUE(error->text().contains("(0, 10]")) << error->text().toStdString();
    EXPECT_EQ(lr->text(), text);  // kept as typed, not reverted
    EXPECT_FALSE(launch->isEnabled()) << text;
    QString why;
    EXPECT_TRUE(page.writeJob(&why).isEmpty()) << text;  // no job with a value that was not typed
    EXPECT_EQ(why, error->text());
  }
  retype(lr, "3e-3");
  EXPECT_FALSE(error->isVisible());
  EXPECT_TRUE(launch->isEnabled());
  EXPECT_DOUBLE_EQ(page.settings().lr, 3e-3);
}

TEST(NewRunPage, RefusesAMicroBatchAboveTheWorkersLimit) {
  NewRunPage page;
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  auto* batch = page.findChild<QSpinBox*>("microBatch");
  auto* error = page.findChild<QLabel*>("microBatchError");
  ASSERT_NE(batch, nullptr);
  ASSERT_NE(error, nullptr);
  retype(batch, "65536");
  EXPECT_EQ(page.settings().microBatchSize, 65536);
  EXPECT_FALSE(error->isVisible());
  retype(batch, "100000");
  EXPECT_EQ(batch->value(), 100000);  // not clamped to something else without a word
  EXPECT_TRUE(error->isVisible());
  EXPECT_TRUE(error->text().contains(QLocale().toString(65536))) << error->text().toStdString();
  QString why;
  EXPECT_TRUE(page.writeJob(&why).isEmpty());
  EXPECT_EQ(why, error->text());
  retype(batch, "8");
  EXPECT_FALSE(error->isVisible());
  EXPECT_TRUE(page.inputError().isEmpty());
}

TEST(NewRunPage, AppliesThePlansSuggestedBatch) {
  NewRunPage page;
  JobSettings settings = page.settings();
  settings.microBatchSize = 4;
  settings.gradAccum = 4;
  page.setSettings(settings);
  page.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&page));
  const char* plan = R"json({"fits": true, "reason": "",
    "tiers": {"hbm": {"needed_bytes": 1.4e10, "free_bytes": 8.4e10, "total_bytes": 8.5e10},
              "dram": {"needed_bytes": 1.08e11, "free_bytes": 1.3e11, "total_bytes": 1.34e11},
              "ssd": {"needed_bytes": 0, "free_bytes": 6.4e10, "total_bytes": 6.4e10}},
    "step": {"step_s": 4.0, "tokens_per_s": 8192, "eta_s": 400, "bottleneck": "compute"},
    "suggestion": {"fits": true, "micro_batch_size": 8, "grad_accum": 4, "tokens_per_step": 65536,
                   "tokens_per_s": 9900.4, "step_s": 6.62, "model_tflops": 408.5, "same_as_job": false,
                   "why": "AdamW (1.5 s) hides behind the forward from 64K tokens per step; micro-batch 8 keeps checkpoints in HBM (25 GB of 84)"}})json";
  page.planView()->setPlan(PlanResult::fromJson(QJsonDocument::fromJson(plan).object()));
  const QString text = page.planView()->suggestionText();
  EXPECT_TRUE(text.startsWith("Suggested: micro-batch 8 × 4 accumulation = 64K tokens/step, " +
                              QLocale().toString(9900.4, 'f', 0) +
                              " tokens/s predicted — AdamW (1.5 s)"))
      << text.toStdString();
  QPushButton* apply = page.planView()->findChild<QPushButton*>("applySuggestion");
  ASSERT_NE(apply, nullptr);
  EXPECT_TRUE(apply->isVisible());
  ASSERT_TRUE(apply->isEnabled());
  QTest::mouseClick(apply, Qt::LeftButton);
  EXPECT_EQ(page.settings().microBatchSize, 8);
  EXPECT_EQ(page.settings().gradAccum, 4);
  EXPECT_FALSE(apply->isEnabled());  // applied; Plan shows the plan of the new settings

  // The job's own values: nothing to apply. Nothing fits: the reason, and no button to press.
  PlanResult own = PlanResult::fromJson(QJsonDocument::fromJson(plan).object());
  own.suggestion.sameAsJob = true;
  page.planView()->setPlan(own);
  EXPECT_TRUE(page.planView()->suggestionText().contains("(the job's own)"));
  EXPECT_FALSE(apply->isEnabled());
  PlanResult none = own;
  none.suggestion = BatchSuggestion::fromJson(
      QJsonDocument::fromJson(
          R"({"fits": false, "why": "no micro-batch fits: DRAM: needs 113 GB"})")
          .object());
  page.planView()->setPlan(none);
  EXPECT_EQ(page.planView()->suggestionText(),
            "Suggested: nothing — no micro-batch fits: DRAM: needs 113 GB");
  EXPECT_FALSE(apply->isEnabled());
  // A plan from a worker without suggestions: no row.
  PlanResult old = own;
  old.suggestion = {};
  page.planView()->setPlan(old);
  EXPECT_FALSE(apply->isVisible());
  for (int waited = 0; waited < 30000 && !page.gpuProbe()->done(); waited += 50) QTest::qWait(50);
}

TEST(TimelineView, ShowsTheLatestDetailedStepFramedByItsStepSpan) {
  auto span = [](const char* block, int layer, const char* phase, double a, double b) {
    Span s;
    s.block = block, s.layer = layer, s.phase = phase, s.start = a, s.end = b;
    return s;
  };
  QVector<Span> spans;
  // Step 1 in detail (three blocks), then steps 2..4 only as whole-step spans, as the trainer
  // writes.
  spans << span("embed", -1, "forward", 0.00, 0.01) << span("layer", 0, "forward", 0.01, 0.05)
        << span("layer", 0, "optimizer", 0.05, 0.08) << span("step", -1, "compute", 0.0, 0.1);
  for (int k = 1; k < 4; ++k) spans << span("step", -1, "compute", k * 0.1, k * 0.1 + 0.1);
  TimelineView view;
  view.setSpans(spans);
  EXPECT_EQ(view.visibleSpans(), 3);
  EXPECT_NEAR(view.shownSeconds(), 0.1, 1e-9);  // the frame of step 1
  view.setSpans({});
  EXPECT_EQ(view.visibleSpans(), 0);
}

TEST(RunHistoryModel, ShowsRunsFromTheStoreAndDeletes) {
  TempDir dir;
  const std::string db = dir.path() + "/runs.db";
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    for (int k = 0; k < 2; ++k) {
      RunInfo info;
      info.name = k == 0 ? "alpha" : "beta";
      info.model_name = "stories260K";
      info.dataset = "/data/input.txt";
      info.run_dir = dir.path() + "/run" + std::to_string(k);
      fs::create_directories(info.run_dir);
      info.job_json = k == 0 ? R"({"train":{"lr":0.001}})" : R"({"train":{"lr":0.002}})";
      auto id = (*store)->create_run(info);
      ASSERT_TRUE(id.ok());
      for (int s = 1; s <= 4; ++s)
        ASSERT_TRUE((*store)
                        ->add_metric(*id, MetricRow{s, 3.0 - 0.1 * s, 1e-3, 1.0, s * 100, 100.0 * s,
                                                    0.1, double(s)})
                        .ok());
      ASSERT_TRUE(
          (*store)
              ->add_sample(*id, 1.0,
                           R"({"tiers":{"dram":{"used_bytes":5000000},"hbm":{"used_bytes":1000}}})")
              .ok());
      FinalFigures f;
      f.final_loss = 2.6;
      f.final_step = 4;
      f.tokens = 400;
      ASSERT_TRUE((*store)->finish_run(*id, RunStatus::kCompleted, f).ok());
      if (k == 0) {
        ASSERT_TRUE((*store)
                        ->set_step_figures(
                            *id, R"({"step_s":6.53,"peak_hbm_bytes":26000000000})",
                            R"({"step_s":6.5,"peak_hbm_bytes":26290749440,"tokens_per_s":10089})")
                        .ok());
      }
    }
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  ASSERT_EQ(model.rowCount(), 2);
  const int row = model.rowOfRun(q(model.run(0).info.id));
  EXPECT_EQ(row, 0);
  auto cell = [&](int r, int c) {
    return model.data(model.index(r, c), Qt::DisplayRole).toString();
  };
  EXPECT_EQ(cell(0, RunHistoryModel::kStatus), "completed");
  EXPECT_EQ(cell(0, RunHistoryModel::kFinalLoss), "2.6000");
  EXPECT_EQ(cell(0, RunHistoryModel::kTokensPerSecond), "250");  // mean of 100..400
  EXPECT_EQ(cell(0, RunHistoryModel::kPeakDram), "5.00 MB");
  // The plan's step time against the measured one, every figure in the tooltip; "—" unmeasured.
  const int alpha = model.run(0).info.name == "alpha" ? 0 : 1;  // the run with figures
  EXPECT_EQ(cell(alpha, RunHistoryModel::kStepTime).toStdString(), "6.53 s → 6.50 s");
  const QString tip =
      model.data(model.index(alpha, RunHistoryModel::kStepTime), Qt::ToolTipRole).toString();
  EXPECT_TRUE(tip.contains("Peak HBM: 26.0 GB → 26.3 GB (1.01)")) << tip.toStdString();
  EXPECT_TRUE(tip.contains("Tokens/s: — → 10089")) << tip.toStdString();
  EXPECT_EQ(cell(1 - alpha, RunHistoryModel::kStepTime).toStdString(), "—");
  model.refresh();  // a finished run's figures come from the cache, the same
  ASSERT_TRUE(waitForHistory(&model));
  EXPECT_EQ(cell(0, RunHistoryModel::kPeakDram), "5.00 MB");
  EXPECT_EQ(cell(0, RunHistoryModel::kTokensPerSecond), "250");

  // Compare: the config diff shows only the differing key.
  ComparePage compare(&model);
  compare.setRuns({q(model.run(0).info.id), q(model.run(1).info.id)});
  ASSERT_TRUE(waitForCompare(&compare));
  ASSERT_EQ(compare.diffTable()->rowCount(), 1);
  EXPECT_EQ(compare.diffTable()->item(0, 0)->text(), "train.lr");
  TempDir out;
  EXPECT_TRUE(compare.exportCsv(q(out.path() + "/m.csv")));
  QFile csv(q(out.path() + "/m.csv"));
  ASSERT_TRUE(csv.open(QIODevice::ReadOnly));
  EXPECT_EQ(csv.readAll().count('\n'), 9);  // header + 2 runs x 4 steps
  // Tier usage: HBM and DRAM of each run (no SSD reported), in MB, placed on the chosen x axis.
  ASSERT_EQ(compare.memoryPlot()->graphCount(), 4);
  EXPECT_EQ(compare.memoryPlot()->yAxis->label(), "MB");
  EXPECT_DOUBLE_EQ(compare.memoryPlot()->graph(1)->data()->at(0)->value, 5.0);
  EXPECT_DOUBLE_EQ(compare.memoryPlot()->graph(1)->data()->at(0)->key, 1.0);  // t 1 s = step 1
  compare.setXAxis(ComparePage::kTokens);
  EXPECT_DOUBLE_EQ(compare.memoryPlot()->graph(1)->data()->at(0)->key,
                   100.0);  // step 1 = 100 tokens
  EXPECT_DOUBLE_EQ(compare.lossPlot()->graph(0)->data()->at(3)->key, 400.0);
  compare.resize(900, 500);
  EXPECT_TRUE(compare.exportChart(q(out.path() + "/charts.png")));
  EXPECT_GE(QImage(q(out.path() + "/charts.png")).width(), 1800);  // all three charts
  EXPECT_TRUE(compare.exportChart(q(out.path() + "/charts.svg")));
  EXPECT_GT(fs::file_size(out.path() + "/charts.svg"), 100u);

  // Delete removes the rows and the run's folder.
  const std::string runDir = model.run(0).info.run_dir;
  EXPECT_EQ(HistoryPage::deleteRun(&model, q(model.run(0).info.id)), "");
  ASSERT_TRUE(waitForEdits(&model));  // written on a pool thread, and History has read it again
  EXPECT_EQ(model.rowCount(), 1);
  EXPECT_FALSE(fs::exists(runDir));
}

// Compare reads each run's metrics once, on a pool thread, and caches them: the smoothing slider
// and the x axis re-derive the curves from the cache and read nothing from the store, and the
// curves still change with the smoothing.
TEST(ComparePage, TheSliderAndTheAxisRedrawFromTheCache) {
  TempDir tmp;
  const std::string db = tmp.path() + "/runs.db";
  std::string a, b;
  {
    auto store = RunStore::open(db);
    ASSERT_TRUE(store.ok());
    for (std::string* id : {&a, &b}) {
      RunInfo info;
      info.name = id == &a ? "a" : "b";
      info.status = RunStatus::kCompleted;
      info.job_json = R"({"train":{"lr":0.001}})";
      auto created = (*store)->create_run(info);
      ASSERT_TRUE(created.ok());
      *id = *created;
      for (int step = 1; step <= 20; ++step) {
        MetricRow m;
        m.step = step;
        m.loss = 3.0 + (step % 2 ? 0.5 : -0.5);  // a zigzag that smoothing flattens
        m.tokens = step * 100;
        m.tokens_per_s = 100.0 * step;
        m.t_s = step;
        ASSERT_TRUE((*store)->add_metric(*id, m).ok());
      }
    }
  }
  RunHistoryModel model;
  ASSERT_EQ(model.open(q(db)), "");
  ASSERT_TRUE(waitForHistory(&model));
  ComparePage compare(&model);
  compare.setRuns({q(a), q(b)});
  EXPECT_TRUE(compare.loading());
  ASSERT_TRUE(waitForCompare(&compare));
  EXPECT_EQ(compare.runsLoaded(), 2);
  QCustomPlot* plot = compare.lossPlot();
  ASSERT_EQ(plot->graphCount(), 2);
  auto lastLoss = [&] { return plot->graph(0)->data()->at(19)->value; };
  auto* slider = compare.findChild<QSlider*>();
  ASSERT_NE(slider, nullptr);
  slider->setValue(0);  // no smoothing: the raw zigzag
  EXPECT_DOUBLE_EQ(lastLoss(), 2.5);
  for (int v = 1; v <= 99; v += 7) slider->setValue(v);  // a drag
  EXPECT_NE(lastLoss(), 2.5);                            // smoothed towards 3
  EXPECT_NEAR(lastLoss(), 3.0, 0.5);
  compare.setXAxis(ComparePage::kTokens);
  EXPECT_DOUBLE_EQ(plot->graph(0)->data()->at(19)->key, 2000.0);
  compare.setXAxis(ComparePage::kWallTime);
  EXPECT_DOUBLE_EQ(plot->graph(0)->data()->at(19)->key, 20.0);
  EXPECT_FALSE(compare.loading());
  EXPECT_EQ(compare.runsLoaded(), 2);  // the slider and the axis read nothing
  // Choosing the runs again reads them again (a running run has new steps).
  compare.setRuns({q(a)});
  ASSERT_TRUE(waitForCompare(&compare));
  EXPECT_EQ(compare.runsLoaded(), 3);
  EXPECT_EQ(plot->graphCount(), 1);
}

TEST(ConfigDiff, AllOrDifferencesOnly) {
  const QStringList jobs = {
      R"({"name":"a","train":{"lr":0.001,"steps":100},"data":{"seq_len":256}})",
      R"({"name":"b","train":{"lr":0.001,"steps":200},"data":{"seq_len":256}})"};
  auto all = configDiff(jobs, false);
  auto diff = configDiff(jobs, true);
  EXPECT_EQ(all.size(), 4);
  ASSERT_EQ(diff.size(), 2);
  EXPECT_EQ(diff[0].key, "name");
  EXPECT_EQ(diff[1].key, "train.steps");
  EXPECT_EQ(diff[1].values, (QStringList{"100", "200"}));
}

// Two runs whose seeds differ only past 2^53 (2^64 - 1 and 2^64 - 2: one double) differ in the
// table, each shown whole.
TEST(ConfigDiff, SixtyFourBitSeedsAreShownAndComparedWhole) {
  const QStringList jobs = {R"({"name":"a","data":{"seed":18446744073709551615}})",
                            R"({"name":"a","data":{"seed":18446744073709551614}})"};
  auto diff = configDiff(jobs, true);
  ASSERT_EQ(diff.size(), 1);
  EXPECT_EQ(diff[0].key, "data.seed");
  EXPECT_EQ(diff[0].values, (QStringList{"18446744073709551615", "18446744073709551614"}));
}

TEST(JobSettings, RoundTripsThroughTheJobFile) {
  JobSettings s;
  s.name = "x";
  s.modelPath = "/m";
  s.trainPath = "/d.jsonl";
  s.lr = 3e-4;
  s.steps = 77;
  s.optimizerTier = "ssd";
  s.ssdDir = "/nvme";
  s.runDir = "/runs/x";
  JobSettings back = JobSettings::fromJson(s.toJson());
  EXPECT_EQ(back.modelPath, "/m");
  EXPECT_EQ(back.steps, 77);
  EXPECT_DOUBLE_EQ(back.lr, 3e-4);
  EXPECT_EQ(back.optimizerTier, "ssd");
  EXPECT_EQ(back.runDir, "/runs/x");
  // Keys the form does not show survive a clone; the form's fields win.
  JobSettings clone = JobSettings::fromText(
      R"({"name":"c","model":{"path":"/m"},"data":{"train":"/d","eval_fraction":0.2},
      "train":{"epochs":2,"beta2":0.95,"eval_batches":7,"lr":0.5},"placement":{"weight_slots":3},"output":{"db":"/x.db"}})");
  clone.lr = 1e-3;
  const nlohmann::json out = clone.toJson();
  EXPECT_DOUBLE_EQ(out["train"]["beta2"].get<double>(), 0.95);
  EXPECT_EQ(out["train"]["eval_batches"].get<int>(), 7);
  EXPECT_DOUBLE_EQ(out["train"]["lr"].get<double>(), 1e-3);
  // An epoch-based run is cloned as one (the form has both steps and epochs).
  EXPECT_EQ(out["train"]["steps"].get<int>(), 0);
  EXPECT_DOUBLE_EQ(out["train"]["epochs"].get<double>(), 2);
  EXPECT_EQ(out["placement"]["weight_slots"].get<int>(), 3);
  EXPECT_EQ(out["output"]["db"], "/x.db");
  EXPECT_DOUBLE_EQ(out["data"]["eval_fraction"].get<double>(), 0.2);
}

}  // namespace
}  // namespace spillway::ui

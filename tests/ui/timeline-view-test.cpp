// The timeline frames one step and says what limits it (issue 11 point 5). On a GPU run every
// step has per-block spans and the optimizer of step N runs after step N's "step" span, beside step
// N+1's forward, so steps never leave a gap: the frame is one step span to the next, the spans that
// began before it (the previous step's optimizer and D2H) clipped to it. The busy share of a lane
// is the union of its spans over the frame; the verdict names the lane busy while compute idles.
// The spans are shaped like the worker's (llama2-7b on an H100 for the first test, the CPU backend
// on stories260K for the last), with round numbers so that every value is worked out by hand.
#include <gtest/gtest.h>

#include <QComboBox>
#include <QTest>
#include <cmath>

#include "RunSeries.h"
#include "TimelineView.h"

namespace spillway::ui {
namespace {

Span span(const char* block, int layer, const char* phase, double a, double b) {
  Span s;
  s.block = block, s.layer = layer, s.phase = phase, s.start = a, s.end = b;
  return s;
}

// One step of four layers as the cuda trainer records it, starting at T (seconds), in the order
// the events arrive: its block spans, its step span [T, T + 0.79], then its optimizer spans (which
// run past the step span into the next step). Compute back to back from T + 0.005: forward 4 x
// 0.1 s, backward 4 x 0.095 s (to T + 0.785). H2D ahead of each layer: the embedding's [T, T +
// 0.004] inside layer 0's [T, T + 0.005], 0.05 s before layers 1..3's forward and 0.04 s before
// each backward. D2H 0.02 s after each backward (the last to T + 0.805). Optimizer 4 x 0.1 s from
// T + 0.79. The step event follows at T + 0.7901.
void addGpuStep(QVector<Span>& spans, Ring& stepTimes, int step, double T) {
  spans << span("embed", -1, "h2d", T, T + 0.004) << span("layer", 0, "h2d", T, T + 0.005);
  for (int l = 0; l < 4; ++l) {
    const double fs = T + 0.005 + 0.1 * l;
    if (l > 0) spans << span("layer", l, "h2d", fs - 0.06, fs - 0.01);
    spans << span("layer", l, "forward", fs, fs + 0.1);
  }
  for (int j = 0; j < 4; ++j) {
    const double bs = T + 0.405 + 0.095 * j;
    spans << span("layer", 3 - j, "h2d", bs - 0.05, bs - 0.01)
          << span("layer", 3 - j, "backward", bs, bs + 0.095)
          << span("layer", 3 - j, "d2h", bs + 0.095, bs + 0.115);
  }
  spans << span("step", -1, "compute", T, T + 0.79);
  for (int l = 0; l < 4; ++l)
    spans << span("layer", l, "optimizer", T + 0.79 + 0.1 * l, T + 0.89 + 0.1 * l);
  stepTimes.append(step, T + 0.7901);
}

TEST(TimelineView, FramesOneGpuStepAndFindsItComputeBound) {
  QVector<Span> spans;
  Ring stepTimes;
  // Steps 1..3 back to back, 0.8 s apart: step 3 is the latest, but the forward of step 4 beside
  // its optimizer has not arrived; step 2 is the latest step whose frame is complete.
  for (int k = 0; k < 3; ++k) addGpuStep(spans, stepTimes, k + 1, 1.0 + 0.8 * k);
  TimelineView view;
  view.resize(1200, 170);
  view.setSpans(spans, 0, &stepTimes);
  const double T = 1.8;
  EXPECT_EQ(view.frameStep(), 2);
  EXPECT_NEAR(view.frameStart(), T, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), 0.8, 1e-9);  // to step 3's start, not 60 s of squeezed steps
  // Compute: 0.4 + 0.38 s of 0.8 (idle 5 ms at the start, 15 ms at the end).
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.78 / 0.8, 1e-9);
  // H2D: the union, not the sum: 0.005 (embedding inside layer 0) + 3 x 0.05 + 4 x 0.04 = 0.315.
  // Step 3's first H2D starts at the frame's end and is not in it.
  EXPECT_NEAR(view.laneBusyFraction("h2d"), 0.315 / 0.8, 1e-9);
  // D2H: step 1's last one clipped to its 5 ms inside the frame, 3 x 0.02, the last 0.015 of
  // step 2's own (clipped at the frame's end): 0.08.
  EXPECT_NEAR(view.laneBusyFraction("d2h"), 0.08 / 0.8, 1e-9);
  // Optimizer: step 1's, from 10 ms before the frame to T + 0.39 (0.39 inside), and the first
  // 10 ms of step 2's own: 0.4.
  EXPECT_NEAR(view.laneBusyFraction("optimizer"), 0.4 / 0.8, 1e-9);
  EXPECT_EQ(view.laneBusyFraction("ssd_read"), 0);
  EXPECT_EQ(view.laneBusyFraction("ssd_write"), 0);
  EXPECT_EQ(view.laneBusyFraction("nvlink"), -1);
  QString lane;
  EXPECT_EQ(view.limiter(&lane), "compute-bound (GPU idle 2.5%)");
  EXPECT_EQ(lane, "compute");
  EXPECT_EQ(view.summary(),
            "step 2 · 800 ms · compute 97.5% busy · H2D 39% · D2H 10% · optimizer 50% · "
            "compute-bound (GPU idle 2.5%)");
  // Step 2's 21 block spans and its first update, step 1's last D2H and its four updates; step
  // 3's first two H2D start at the frame's end and are left out.
  EXPECT_EQ(view.visibleSpans(), 22 + 1 + 4);
  // Drawn: the summary line above the lanes is inked.
  view.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&view));
  const QImage img = view.grab().toImage();
  int inked = 0;
  for (int y = 0; y < view.fontMetrics().height() + 4; ++y)
    for (int x = 0; x < 400; ++x) inked += QColor(img.pixel(x, y)) != view.palette().base().color();
  EXPECT_GT(inked, 200);
  EXPECT_EQ(view.toolTip(), view.summary());
  // Without the step times the step is not named.
  view.setSpans(spans);
  EXPECT_EQ(view.frameStep(), 0);
  EXPECT_TRUE(view.summary().startsWith("one step · 800 ms · ")) << view.summary().toStdString();
  // Once step 4's spans and step span arrive, step 3 is framed.
  addGpuStep(spans, stepTimes, 4, 1.0 + 0.8 * 3);
  view.setSpans(spans, 0, &stepTimes);
  EXPECT_EQ(view.frameStep(), 3);
  EXPECT_NEAR(view.frameStart(), 2.6, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.975, 1e-9);
}

// Compute that waits: four layers whose forward (0.06 s) waits for its weights (H2D 0.1 s each,
// back to back from T), framed [T, T + 0.5] by the next step span. Compute is busy 0.24 s; of its
// 0.26 s idle, H2D covers 0.1 + 3 x 0.04 = 0.22 s. The same shape with the optimizer in the H2D
// lane's place (the next forward waiting for each layer's update), and with no lane at all.
TEST(TimelineView, NamesTheLaneComputeWaitsFor) {
  struct Case {
    const char* phase;  // what runs ahead of each layer; "" for nothing
    const char* verdict;
    const char* lane;
  };
  const Case cases[] = {
      {"h2d", "waiting for H2D (weights): GPU idle 52%", "h2d"},
      {"reduce", "waiting for the collectives between GPUs: GPU idle 52%", "reduce"},
      {"optimizer", "waiting for the optimizer: GPU idle 52%", "optimizer"},
      {"ssd_read", "waiting for the SSD (reads): GPU idle 52%", "ssd_read"},
      {"", "host (no lane busy): GPU idle 52%", ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.verdict);
    const double T = 10;
    QVector<Span> spans;
    for (int l = 0; l < 4; ++l) {
      if (*c.phase) spans << span("layer", l, c.phase, T + 0.1 * l, T + 0.1 * (l + 1));
      spans << span("layer", l, "forward", T + 0.1 * (l + 1), T + 0.1 * (l + 1) + 0.06);
    }
    // D2H busy during 0.03 s of the idle time at the end: less than the lane ahead of the layers.
    spans << span("layer", 0, "d2h", T + 0.47, T + 0.5);
    spans << span("step", -1, "compute", T, T + 0.46)
          << span("step", -1, "compute", T + 0.5, T + 0.9);
    TimelineView view;
    view.setSpans(spans);
    EXPECT_NEAR(view.shownSeconds(), 0.5, 1e-9);
    EXPECT_NEAR(view.laneBusyFraction("compute"), 0.48, 1e-9);
    if (*c.phase) {
      EXPECT_NEAR(view.laneBusyFraction(c.phase), 0.8, 1e-9);
    }
    QString lane = "unset";
    EXPECT_EQ(view.limiter(&lane), c.verdict);
    EXPECT_EQ(lane, c.lane);
  }
}

// The CPU backend: steps of about 0.2 s, per-block spans for about one step a second, zero-length
// H2D and D2H (no copies), and here gaps of 0.3 s between steps. The latest detailed step with a
// step after it is framed from its start to the end of its own work; the steps without blocks are
// not framed; the window mode and the runs without step spans still work.
TEST(TimelineView, FramesACpuRunWithGapsBetweenSteps) {
  QVector<Span> spans;
  Ring stepTimes;
  auto step = [&](int n, bool detailed) {
    const double T = 0.5 * (n - 1);  // steps 0.2 s long, 0.5 s apart
    if (detailed) {
      for (int l = 0; l < 5; ++l) {
        spans << span("layer", l, "h2d", T + 0.02 * l, T + 0.02 * l)
              << span("layer", l, "forward", T + 0.02 * l, T + 0.02 * (l + 1));
      }
      for (int l = 4; l >= 0; --l) {
        const double bs = T + 0.1 + 0.02 * (4 - l);
        spans << span("layer", l, "backward", bs, bs + 0.02)
              << span("layer", l, "d2h", bs + 0.02, bs + 0.02);
      }
    }
    spans << span("step", -1, "compute", T, T + 0.2);
    if (detailed)  // its update, after the step span, before the next step
      for (int l = 0; l < 5; ++l)
        spans << span("layer", l, "optimizer", T + 0.2 + 0.001 * l, T + 0.201 + 0.001 * l);
    stepTimes.append(n, T + 0.2001);
  };
  for (int n = 1; n <= 5; ++n) step(n, n == 1 || n == 4);
  TimelineView view;
  view.resize(800, 170);
  view.setComputeName("CPU");
  view.setSpans(spans, 0, &stepTimes);
  // Step 4 [1.5, 1.7] and its update to 1.705; step 5 (no blocks) starts at 2.0.
  EXPECT_EQ(view.frameStep(), 4);
  EXPECT_NEAR(view.frameStart(), 1.5, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), 0.205, 1e-9);
  EXPECT_EQ(view.visibleSpans(), 25);
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.2 / 0.205, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("optimizer"), 0.005 / 0.205, 1e-9);
  EXPECT_EQ(view.laneBusyFraction("h2d"), 0);
  EXPECT_EQ(view.limiter(), "compute-bound (CPU idle 2.4%)");
  EXPECT_EQ(view.summary(),
            "step 4 · 205 ms · compute 97.6% busy · H2D 0% · D2H 0% · optimizer 2% · "
            "compute-bound (CPU idle 2.4%)");
  EXPECT_EQ(view.tickLabels(), (QStringList{"0", "50", "100", "150", "200 ms"}));

  // Only the latest step has blocks (a run's final step, or its first): framed from its start
  // to the end of its update.
  spans.clear();
  stepTimes = Ring();
  for (int n = 1; n <= 5; ++n) step(n, n == 5);
  view.setSpans(spans, 0, &stepTimes);
  EXPECT_EQ(view.frameStep(), 5);
  EXPECT_NEAR(view.frameStart(), 2.0, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), 0.205, 1e-9);

  // The window mode: the 0.1 s before the latest block's end (step 5's last update).
  view.setSpans(spans, 0.1);
  EXPECT_NEAR(view.frameStart(), 2.105, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), 0.1, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.095 / 0.1, 1e-9);
  EXPECT_TRUE(view.summary().startsWith("last 100 ms · compute 95.0% busy · "))
      << view.summary().toStdString();

  // Without step spans (a worker that wrote none): the blocks back to the last gap of half a
  // second, here step 5's.
  QVector<Span> blocks;
  for (const Span& s : spans)
    if (s.block != "step") blocks << s;
  QVector<Span> earlier;
  for (int l = 0; l < 3; ++l) earlier << span("layer", l, "forward", 0.1 * l, 0.1 * l + 0.05);
  view.setSpans(earlier + blocks);
  EXPECT_EQ(view.frameStep(), 0);
  EXPECT_NEAR(view.frameStart(), 2.0, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), 0.205, 1e-9);
  EXPECT_TRUE(view.summary().startsWith("latest blocks · 205 ms · "))
      << view.summary().toStdString();

  // Nothing to show.
  view.setSpans({});
  EXPECT_EQ(view.laneBusyFraction("compute"), -1);
  EXPECT_TRUE(view.limiter().isEmpty());
  EXPECT_TRUE(view.summary().isEmpty());
  EXPECT_TRUE(view.toolTip().isEmpty());
}

// The run is over (a final state: completed, stopped or failed): no step span will follow the
// last, so the last step is framed, from its start to the end of its optimizer tail, rather than
// the one before it. On the GPU steps of the first test: step 3 of 3 is [2.6, 3.39], its updates
// run to 3.79. A run stopped inside step 4 (no step span for it) frames step 3 the same way: the
// cut step's forward, beside step 3's updates, is in the frame, but its gradients' D2H (after its
// backward began) do not stretch it.
TEST(TimelineView, FramesTheLastStepWhenTheRunIsOver) {
  QVector<Span> spans;
  Ring stepTimes;
  for (int k = 0; k < 3; ++k) addGpuStep(spans, stepTimes, k + 1, 1.0 + 0.8 * k);
  TimelineView view;
  view.resize(1200, 170);
  view.setSpans(spans, 0, &stepTimes);  // running: step 3's frame is not complete yet
  EXPECT_EQ(view.frameStep(), 2);
  EXPECT_NEAR(view.shownSeconds(), 0.8, 1e-9);

  view.setSpans(spans, 0, &stepTimes, /*runOver=*/true);
  const double T = 2.6, frame = 1.19;
  EXPECT_EQ(view.frameStep(), 3);
  EXPECT_NEAR(view.frameStart(), T, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), frame, 1e-9);  // to its last update's end, T + 0.79 + 0.4
  // Compute: forward 0.4 + backward 0.38 s; nothing after it (the run is over).
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.78 / frame, 1e-9);
  // H2D: step 3's own 0.315 s (as for step 2 in the first test).
  EXPECT_NEAR(view.laneBusyFraction("h2d"), 0.315 / frame, 1e-9);
  // D2H: step 2's last one, 5 ms inside, and step 3's four of 0.02 s.
  EXPECT_NEAR(view.laneBusyFraction("d2h"), 0.085 / frame, 1e-9);
  // Optimizer: step 2's updates to T + 0.39 and step 3's four whole, [T + 0.79, T + 1.19].
  EXPECT_NEAR(view.laneBusyFraction("optimizer"), 0.79 / frame, 1e-9);
  // Compute idles 0.005 s at the start and 0.405 s at the end, during which the optimizer runs
  // 0.005 + 0.4 s (D2H 0.025, H2D 0.005): the last step waits for its own update.
  QString lane;
  EXPECT_EQ(view.limiter(&lane), "waiting for the optimizer: GPU idle 34%");
  EXPECT_EQ(lane, "optimizer");
  EXPECT_EQ(view.summary(),
            "step 3 · 1.19 s · compute 65.5% busy · H2D 26% · D2H 7% · optimizer 66% · "
            "waiting for the optimizer: GPU idle 34%");
  // Step 3's 21 block spans and 4 updates, step 2's last D2H and its 4 updates.
  EXPECT_EQ(view.visibleSpans(), 21 + 4 + 1 + 4);

  // Stopped inside step 4 (T4 = 3.4): its forward, its first backward (layer 3, [T4 + 0.405,
  // T4 + 0.5]) with layer 2's weights on their way, layer 3's gradients' D2H [T4 + 0.5, T4 + 0.52],
  // then the stop: no step span, no update.
  QVector<Span> step4;
  Ring unused;
  addGpuStep(step4, unused, 4, 3.4);
  QVector<Span> cut = spans;
  for (const Span& s : step4)
    if (s.block != "step" && s.phase != "optimizer" && s.start <= 3.4 + 0.5 + 1e-9) cut << s;
  view.setSpans(cut, 0, &stepTimes);  // running, as far as the view knows: step 2
  EXPECT_EQ(view.frameStep(), 2);
  view.setSpans(cut, 0, &stepTimes, /*runOver=*/true);
  EXPECT_EQ(view.frameStep(), 3);
  EXPECT_NEAR(view.frameStart(), T, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), frame, 1e-9);  // not to 3.92, the cut step's D2H
  // Step 4's forward from 3.405 to the frame's end, 0.385 s, beside step 3's updates.
  EXPECT_NEAR(view.laneBusyFraction("compute"), (0.78 + 0.385) / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("d2h"), 0.085 / frame, 1e-9);

  // A CPU-like run whose last step span has no blocks: over or not, the latest detailed step
  // with a step after it is framed (its frame was complete already). Here steps 0.2 s long, 0.5 s
  // apart, blocks for steps 2 and 4 of 5 (as the trainer records about one step a second).
  auto cpuRun = [](const QVector<int>& detailed, Ring& times) {
    QVector<Span> out;
    for (int n = 1; n <= 5; ++n) {
      const double t = 0.5 * (n - 1);
      const bool d = detailed.contains(n);
      if (d)
        for (int l = 0; l < 2; ++l)
          out << span("layer", l, "forward", t + 0.05 * l, t + 0.05 * (l + 1))
              << span("layer", l, "backward", t + 0.1 + 0.05 * l, t + 0.15 + 0.05 * l);
      out << span("step", -1, "compute", t, t + 0.2);
      if (d) out << span("layer", 0, "optimizer", t + 0.2, t + 0.25);
      times.append(n, t + 0.2001);
    }
    return out;
  };
  Ring cpuTimes;
  const QVector<Span> cpu = cpuRun({2, 4}, cpuTimes);
  for (const bool over : {false, true}) {
    SCOPED_TRACE(over ? "over" : "running");
    view.setSpans(cpu, 0, &cpuTimes, over);
    EXPECT_EQ(view.frameStep(), 4);
    EXPECT_NEAR(view.frameStart(), 1.5, 1e-9);
    EXPECT_NEAR(view.shownSeconds(), 0.25, 1e-9);
  }
  // The last step has blocks: running, step 4 (complete) is framed; over, step 5, to its update.
  Ring lastTimes;
  const QVector<Span> last = cpuRun({4, 5}, lastTimes);
  view.setSpans(last, 0, &lastTimes);
  EXPECT_EQ(view.frameStep(), 4);
  view.setSpans(last, 0, &lastTimes, /*runOver=*/true);
  EXPECT_EQ(view.frameStep(), 5);
  EXPECT_NEAR(view.frameStart(), 2.0, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), 0.25, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.2 / 0.25, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("optimizer"), 0.05 / 0.25, 1e-9);
}

// Step k (at T) of a data-parallel run on GPUs 0 and 1, two layers, as the worker writes it: each
// GPU's block spans tagged with it, then the step span and the optimizer's (the host's, untagged).
// On GPU d: H2D 0.02 (d + 1) s at each forward's start; forward [T, T + 0.2] and backward [T +
// 0.2, T + 0.4], 0.1 s a layer; each layer's reduce, r = 0.05 + 0.15 d s long, on one stream from
// the end of its backward (layer 1 at T + 0.3, layer 0 at max(T + 0.4, the end of layer 1's)),
// each followed by a 0.01 s D2H of the GPU's share. Step span [T, T + 0.75], optimizer
// [T + 0.75, T + 0.85]; the step event follows at T + 0.7501.
void addTwoGpuStep(QVector<Span>& spans, Ring& stepTimes, int step, double T) {
  for (int d = 0; d < 2; ++d) {
    auto tagged = [&](const char* block, int layer, const char* phase, double a, double b) {
      Span s = span(block, layer, phase, a, b);
      s.device = d;
      return s;
    };
    const double h2d = 0.02 * (d + 1), r = 0.05 + 0.15 * d;
    for (int l = 0; l < 2; ++l)
      spans << tagged("layer", l, "h2d", T + 0.1 * l, T + 0.1 * l + h2d)
            << tagged("layer", l, "forward", T + 0.1 * l, T + 0.1 * (l + 1));
    const double reduce1 = T + 0.3, reduce0 = std::max(T + 0.4, reduce1 + r);
    spans << tagged("layer", 1, "backward", T + 0.2, T + 0.3)
          << tagged("layer", 1, "reduce", reduce1, reduce1 + r)
          << tagged("layer", 1, "d2h", reduce1 + r, reduce1 + r + 0.01)
          << tagged("layer", 0, "backward", T + 0.3, T + 0.4)
          << tagged("layer", 0, "reduce", reduce0, reduce0 + r)
          << tagged("layer", 0, "d2h", reduce0 + r, reduce0 + r + 0.01);
  }
  spans << span("step", -1, "compute", T, T + 0.75)
        << span("layer", 0, "optimizer", T + 0.75, T + 0.85);
  stepTimes.append(step, T + 0.7501);
}

// A data-parallel run: the chooser lists its GPUs and the lanes of the GPU chosen are drawn and
// measured (the host's optimizer lane the same for both); the reduce lane sits between compute and
// D2H and says what it shows. Step 1 is framed, [1, 1.85], on either GPU.
TEST(TimelineView, ADataParallelRunDrawsTheGpuChosen) {
  QVector<Span> spans;
  Ring stepTimes;
  addTwoGpuStep(spans, stepTimes, 1, 1.0);
  addTwoGpuStep(spans, stepTimes, 2, 2.0);
  TimelineView view;
  view.resize(1200, 200);
  view.setSpans(spans, 0, &stepTimes);
  EXPECT_EQ(view.devices(), QList<int>({0, 1}));
  EXPECT_EQ(view.device(), 0);
  QComboBox* chooser = view.deviceChooser();
  ASSERT_FALSE(chooser->isHidden());
  ASSERT_EQ(chooser->count(), 2);
  EXPECT_EQ(chooser->itemText(0), "GPU 0");
  EXPECT_EQ(chooser->itemText(1), "GPU 1");
  EXPECT_EQ(view.shownLanes(),
            QStringList({"ssd_read", "h2d", "compute", "reduce", "d2h", "optimizer", "ssd_write"}));
  const double frame = 0.85;
  EXPECT_EQ(view.frameStep(), 1);
  EXPECT_NEAR(view.frameStart(), 1.0, 1e-9);
  EXPECT_NEAR(view.shownSeconds(), frame, 1e-9);
  // GPU 0: its 10 block spans and the optimizer's; reduce 2 x 0.05 s, H2D 2 x 0.02 s; compute
  // idle 0.45 s, during which no lane is busy half the time (the reduce 0.05 s of it).
  EXPECT_EQ(view.visibleSpans(), 10 + 1);
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.4 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("reduce"), 0.1 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("h2d"), 0.04 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("d2h"), 0.02 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("optimizer"), 0.1 / frame, 1e-9);
  EXPECT_EQ(view.limiter(), "host (no lane busy): GPU idle 53%");
  const QString gpu0 = view.summary();
  EXPECT_EQ(gpu0,
            "step 1 · 850 ms · compute 47.1% busy · H2D 5% · reduce 12% · D2H 2% · optimizer "
            "12% · host (no lane busy): GPU idle 53%");
  view.show();
  ASSERT_TRUE(QTest::qWaitForWindowExposed(&view));
  const QImage drawn0 = view.grab().toImage();

  // The user picks GPU 1: its spans instead of GPU 0's; the optimizer's are the same.
  chooser->setCurrentIndex(1);
  EXPECT_EQ(view.device(), 1);
  EXPECT_EQ(view.visibleSpans(), 10 + 1);
  EXPECT_NEAR(view.shownSeconds(), frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("compute"), 0.4 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("reduce"), 0.4 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("h2d"), 0.08 / frame, 1e-9);
  EXPECT_NEAR(view.laneBusyFraction("optimizer"), 0.1 / frame, 1e-9);
  // Layer 0's reduce [1.5, 1.7] covers 0.2 s of compute's 0.45 s idle, layer 1's 0.1 s more.
  QString lane;
  EXPECT_EQ(view.limiter(&lane), "waiting for the collectives between GPUs: GPU idle 53%");
  EXPECT_EQ(lane, "reduce");
  EXPECT_EQ(view.toolTip(), view.summary());
  EXPECT_NE(view.grab().toImage(), drawn0);
  // New spans keep the choice.
  addTwoGpuStep(spans, stepTimes, 3, 3.0);
  view.setSpans(spans, 0, &stepTimes);
  EXPECT_EQ(view.device(), 1);
  EXPECT_EQ(chooser->currentIndex(), 1);
  EXPECT_EQ(view.frameStep(), 2);
  EXPECT_NEAR(view.laneBusyFraction("reduce"), 0.4 / frame, 1e-9);
  view.setDevice(7);  // not a device of the run: ignored
  EXPECT_EQ(view.device(), 1);
  view.setDevice(0);
  EXPECT_EQ(chooser->currentIndex(), 0);
  EXPECT_NEAR(view.laneBusyFraction("reduce"), 0.1 / frame, 1e-9);

  // Each lane's row says what it shows, and whose it is.
  bool reduceRow = false;
  for (int y = 0; y < view.height() && !reduceRow; ++y)
    reduceRow = view.laneAt(QPoint(10, y)) == "reduce";
  EXPECT_TRUE(reduceRow) << "no row of the reduce lane";
  EXPECT_EQ(view.laneAt(QPoint(10, 0)), "");
  EXPECT_TRUE(view.laneToolTip("reduce").startsWith("reduce: collectives between GPUs"))
      << view.laneToolTip("reduce").toStdString();
  EXPECT_TRUE(view.laneToolTip("reduce").endsWith("(GPU 0's)"));
  EXPECT_TRUE(view.laneToolTip("optimizer").endsWith("(the host's, for every GPU)"));

  // A one-GPU run's spans name no device: no chooser, no reduce lane, every span drawn.
  QVector<Span> one;
  Ring oneTimes;
  addGpuStep(one, oneTimes, 1, 1.0);
  addGpuStep(one, oneTimes, 2, 1.8);
  view.setSpans(one, 0, &oneTimes);
  EXPECT_TRUE(view.devices().isEmpty());
  EXPECT_EQ(view.device(), -1);
  EXPECT_TRUE(chooser->isHidden());
  EXPECT_EQ(view.shownLanes(),
            QStringList({"ssd_read", "h2d", "compute", "d2h", "optimizer", "ssd_write"}));
  EXPECT_EQ(view.frameStep(), 1);
  EXPECT_EQ(view.laneBusyFraction("reduce"), 0);
  EXPECT_EQ(view.laneToolTip("d2h"), "D2H: gradients downloaded to DRAM");
}

// The CPU backend's ranks are named by their rank.
TEST(TimelineView, NamesTheCpuBackendsRanks) {
  QVector<Span> spans;
  Ring stepTimes;
  addTwoGpuStep(spans, stepTimes, 1, 1.0);
  TimelineView view;
  view.setComputeName("CPU");
  view.setSpans(spans, 0, &stepTimes, /*runOver=*/true);
  ASSERT_EQ(view.deviceChooser()->count(), 2);
  EXPECT_EQ(view.deviceChooser()->itemText(1), "CPU rank 1");
  EXPECT_TRUE(view.limiter().endsWith("CPU idle 53%")) << view.limiter().toStdString();
}
}  // namespace
}  // namespace spillway::ui

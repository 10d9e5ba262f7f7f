// The timeline frames one step and says what limits it (issue 11 point 5). On a GPU run every
// step has per-block spans and the optimizer of step N runs after step N's "step" span, beside step
// N+1's forward, so steps never leave a gap: the frame is one step span to the next, the spans that
// began before it (the previous step's optimizer and D2H) clipped to it. The busy share of a lane
// is the union of its spans over the frame; the verdict names the lane busy while compute idles.
// The spans are shaped like the worker's (llama2-7b on an H100 for the first test, the CPU backend
// on stories260K for the last), with round numbers so that every value is worked out by hand.
#include <gtest/gtest.h>

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

}  // namespace
}  // namespace spillway::ui

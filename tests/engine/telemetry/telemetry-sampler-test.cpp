#include "telemetry/telemetry-sampler.h"

#include <gtest/gtest.h>

#include <atomic>
#include <sstream>
#include <thread>

#include "core/file-util.h"
#include "test-data.h"

namespace spillway {
namespace {

using Json = nlohmann::json;

TEST(TelemetrySampler, LinkRatesComeFromCounterDeltas) {
  TierCounters counters;
  counters.add(Tier::kHbm, Category::kWeights, 1 << 20);
  counters.set_capacity(Tier::kHbm, 8ull << 30);
  counters.add(Tier::kDram, Category::kMaster, 4 << 20);
  TelemetrySamplerOptions opt;
  opt.ssd_path = "/tmp";
  TelemetrySampler sampler(counters, nullptr, opt);
  (void)sampler.sample_once();  // baseline

  counters.add_moved(Link::kH2D, 2'000'000'000ull);
  counters.add_moved(Link::kSsdWrite, 500'000'000ull);
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  Json s = sampler.sample_once();

  double dt = s["interval_s"].get<double>();
  ASSERT_GT(dt, 0.04);
  EXPECT_NEAR(s["links"]["h2d_gbps"].get<double>(), 2.0 / dt, 1e-6 * (2.0 / dt));
  EXPECT_NEAR(s["links"]["ssd_write_gbps"].get<double>(), 0.5 / dt, 1e-6 * (0.5 / dt));
  EXPECT_EQ(s["links"]["d2h_gbps"].get<double>(), 0.0);
  EXPECT_EQ(s["links"]["h2d_bytes"].get<std::uint64_t>(), 2'000'000'000ull);

  EXPECT_EQ(s["tiers"]["hbm"]["weights_bytes"], 1 << 20);
  EXPECT_EQ(s["tiers"]["hbm"]["used_bytes"], 1 << 20);
  EXPECT_EQ(s["tiers"]["hbm"]["capacity_bytes"], 8ull << 30);
  EXPECT_EQ(s["tiers"]["dram"]["master_bytes"], 4 << 20);
  EXPECT_FALSE(s["tiers"]["dram"].contains("capacity_bytes"));  // not declared: absent, not 0
  EXPECT_FALSE(s["tiers"]["hbm"].contains("device_free_bytes"));
  EXPECT_TRUE(s["tiers"]["dram"].contains("total_bytes"));
  EXPECT_TRUE(s["tiers"]["ssd"].contains("free_bytes"));
  EXPECT_TRUE(s.contains("rss_bytes"));

  // Nothing moved since: rates drop to zero.
  Json quiet = sampler.sample_once();
  EXPECT_EQ(quiet["links"]["h2d_gbps"].get<double>(), 0.0);
}

TEST(TelemetrySampler, DeviceProbeFillsHbm) {
  TierCounters counters;
  TelemetrySamplerOptions opt;
  opt.device_memory = [] {
    return std::optional<DeviceMemory>(DeviceMemory{80ull << 30, 60ull << 30});
  };
  TelemetrySampler sampler(counters, nullptr, opt);
  Json s = sampler.sample_once();
  EXPECT_EQ(s["tiers"]["hbm"]["device_total_bytes"], 80ull << 30);
  EXPECT_EQ(s["tiers"]["hbm"]["device_free_bytes"], 60ull << 30);
  EXPECT_EQ(s["tiers"]["hbm"]["capacity_bytes"], 80ull << 30);
  EXPECT_FALSE(s["tiers"]["ssd"].contains("free_bytes"));  // no ssd_path given
}

TEST(TelemetrySampler, ThreadWritesSampleEventsAndDownsampledCallback) {
  testing::TempDir dir;
  auto w = EventWriter::open(dir.path());
  ASSERT_TRUE(w.ok());
  TierCounters counters;
  std::atomic<int> callbacks{0};
  std::atomic<bool> stop_moving{false};
  TelemetrySamplerOptions opt;
  opt.interval_s = 0.02;
  opt.callback_interval_s = 0.1;
  opt.ssd_path = dir.path();
  opt.on_sample = [&](double, const Json& s) {
    EXPECT_TRUE(s.contains("links"));
    ++callbacks;
  };
  {
    TelemetrySampler sampler(counters, w->get(), opt);
    sampler.start();
    // A steady 1 GB/s "copy" for ~300 ms (longer in sanitizer builds, so the thread gets as many
    // ticks).
    auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 <
           std::chrono::milliseconds(static_cast<int>(300 * testing::kTimeScale))) {
      counters.add_moved(Link::kH2D, 10'000'000);  // 10 MB per 10 ms
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    sampler.stop();
    EXPECT_FALSE(sampler.running());
    EXPECT_TRUE(sampler.last_error().ok());
  }
  auto text = read_file(dir.file("events.jsonl"));
  ASSERT_TRUE(text.ok());
  std::istringstream in(*text);
  std::string line;
  int samples = 0;
  double max_gbps = 0;
  while (std::getline(in, line)) {
    Json j = Json::parse(line, nullptr, false);
    ASSERT_FALSE(j.is_discarded());
    EXPECT_EQ(j["type"], "sample");
    ASSERT_TRUE(j.contains("t"));
    ++samples;
    if (j["links"].contains("h2d_gbps"))
      max_gbps = std::max(max_gbps, j["links"]["h2d_gbps"].get<double>());
  }
  // ~15 ticks at 20 ms; the machine is shared, so only demand a handful.
  EXPECT_GE(samples, 5);
  EXPECT_GT(max_gbps, 0.2);
  EXPECT_LT(max_gbps, 10.0);
  // Callbacks at most once per 0.1 s over ~0.3 s (+ the final sample from stop()).
  EXPECT_GE(callbacks.load(), 1);
  EXPECT_LE(callbacks.load(), 5 * testing::kTimeScale);
}

}  // namespace
}  // namespace spillway

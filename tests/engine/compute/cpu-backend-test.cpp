// CpuBackend memory accounting, streams/events and copies.
#include "compute/cpu/cpu-backend.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

namespace spillway::compute {
namespace {

TEST(CpuBackend, NameAndDtype) {
  auto be = make_cpu_backend();
  EXPECT_EQ(be->name(), "cpu");
  EXPECT_EQ(be->act_dtype(), DType::kF32);
}

TEST(CpuBackend, AllocationsAreAlignedAndCounted) {
  CpuBackend be(CpuBackendOptions{.device_capacity_bytes = 1 << 20});
  auto a = be.device_alloc(1000);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ(reinterpret_cast<uintptr_t>(*a) % 256, 0u);
  EXPECT_EQ(be.device_bytes_in_use(), 1024u);  // rounded up to 256
  size_t free_bytes = 0, total = 0;
  ASSERT_TRUE(be.device_memory_info(&free_bytes, &total).ok());
  EXPECT_EQ(total, 1u << 20);
  EXPECT_EQ(free_bytes, (1u << 20) - 1024u);
  EXPECT_EQ(be.device_bytes_after(static_cast<char*>(*a) + 24), 976u);  // requested bytes
  EXPECT_EQ(be.device_bytes_after(&free_bytes), 0u);
  be.device_free(*a);
  EXPECT_EQ(be.device_bytes_in_use(), 0u);
  EXPECT_EQ(be.device_peak_bytes(), 1024u);
}

TEST(CpuBackend, AllocBeyondCapacityIsOutOfMemory) {
  auto be = make_cpu_backend(1 << 20);
  auto a = be->device_alloc(600 << 10);
  ASSERT_TRUE(a.ok());
  auto b = be->device_alloc(600 << 10);
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), ErrorCode::kOutOfMemory);
  EXPECT_NE(b.status().message().find("requested 614400 bytes"), std::string::npos)
      << b.status().message();
  EXPECT_NE(b.status().message().find("free of 1048576 bytes"), std::string::npos);
  be->device_free(*a);
  auto c = be->device_alloc(600 << 10);  // fits again after the free
  EXPECT_TRUE(c.ok());
  be->device_free(*c);
  EXPECT_EQ(be->device_alloc((1 << 20) + 1).status().code(), ErrorCode::kOutOfMemory);
  EXPECT_TRUE(be->device_alloc(1 << 20).ok());  // exactly the capacity; freed by the backend
}

TEST(CpuBackend, UnboundedCapacityReportsPhysicalMemory) {
  auto be = make_cpu_backend();
  size_t free_bytes = 0, total = 0;
  ASSERT_TRUE(be->device_memory_info(&free_bytes, &total).ok());
  EXPECT_GT(total, 0u);
  auto a = be->device_alloc(64 << 20);
  ASSERT_TRUE(a.ok());
  be->device_free(*a);
}

TEST(CpuBackend, PoisonedAllocationsAreNaN) {
  CpuBackend be(CpuBackendOptions{.poison_allocations = true});
  auto a = be.device_alloc(64 * sizeof(float));
  ASSERT_TRUE(a.ok());
  const float* f = static_cast<const float*>(*a);
  for (int i = 0; i < 64; ++i) EXPECT_TRUE(std::isnan(f[i]));
  ASSERT_TRUE(be.fill_zero(*a, 64 * sizeof(float), 0).ok());
  for (int i = 0; i < 64; ++i) EXPECT_EQ(f[i], 0.0f);
}

TEST(CpuBackend, CopiesRoundTrip) {
  auto be = make_cpu_backend(1 << 20);
  auto s = be->create_stream();
  ASSERT_TRUE(s.ok());
  EXPECT_NE(*s, 0);
  auto dev = be->device_alloc(100 * sizeof(float));
  auto dev2 = be->device_alloc(100 * sizeof(float));
  auto pinned = be->host_alloc_pinned(100 * sizeof(float));
  ASSERT_TRUE(dev.ok() && dev2.ok() && pinned.ok());
  std::vector<float> src(100), dst(100, -1.0f);
  for (int i = 0; i < 100; ++i) src[i] = 0.5f * i;
  ASSERT_TRUE(be->upload_f32(*dev, src.data(), 100, *s).ok());
  ASSERT_TRUE(be->copy_d2d(*dev2, *dev, 100 * sizeof(float), 0).ok());
  ASSERT_TRUE(be->copy_d2h(*pinned, *dev2, 100 * sizeof(float), *s).ok());
  ASSERT_TRUE(be->copy_h2d(*dev, *pinned, 100 * sizeof(float), *s).ok());
  ASSERT_TRUE(be->download_f32(dst.data(), *dev, 100, 0).ok());
  EXPECT_EQ(src, dst);
  be->host_free_pinned(*pinned);
  be->device_free(*dev);
  be->device_free(*dev2);
}

TEST(CpuBackend, StreamsAndEventsAreValidated) {
  auto be = make_cpu_backend();
  auto s = be->create_stream();
  auto e = be->create_event();
  ASSERT_TRUE(s.ok() && e.ok());
  EXPECT_TRUE(be->record_event(*e, *s).ok());
  EXPECT_TRUE(be->stream_wait_event(0, *e).ok());
  EXPECT_TRUE(be->synchronize_event(*e).ok());
  EXPECT_TRUE(be->synchronize_stream(*s).ok());
  EXPECT_TRUE(be->synchronize_stream(0).ok());
  EXPECT_EQ(be->synchronize_stream(*s + 1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->synchronize_stream(-1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->record_event(*e + 1, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->record_event(*e, 7).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->stream_wait_event(0, -1).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->synchronize_event(*e + 1).code(), ErrorCode::kInvalidArgument);
  float x = 1.0f;
  EXPECT_EQ(be->copy_h2d(&x, &x, 4, 9).code(), ErrorCode::kInvalidArgument);
  EXPECT_EQ(be->copy_h2d(nullptr, &x, 4, 0).code(), ErrorCode::kInvalidArgument);
  EXPECT_TRUE(be->copy_h2d(nullptr, nullptr, 0, 0).ok());
}

}  // namespace
}  // namespace spillway::compute

#include "history/process-liveness.h"

#include <gtest/gtest.h>

#include <filesystem>

namespace spillway {
namespace {

TEST(ProcessLiveness, SelfIsAlive) {
  ProcessIdentity self = current_process_identity();
  EXPECT_GT(self.pid, 0);
  EXPECT_FALSE(self.host.empty());
  if (std::filesystem::exists("/proc/self/stat")) {
    ASSERT_TRUE(self.start_ticks.has_value());
    EXPECT_EQ(process_state(self.pid).value_or('?'), 'R');
  }
  EXPECT_EQ(check_process(self), Liveness::kAlive);
}

TEST(ProcessLiveness, ReusedPidIsGone) {
  if (!std::filesystem::exists("/proc/self/stat")) GTEST_SKIP() << "no /proc";
  ProcessIdentity other = current_process_identity();
  *other.start_ticks += 12345;  // same pid, different process start: the pid was reused
  EXPECT_EQ(check_process(other), Liveness::kGone);
}

TEST(ProcessLiveness, OtherBootIsGone) {
  ProcessIdentity other = current_process_identity();
  if (other.boot_id.empty()) GTEST_SKIP() << "no boot id";
  other.boot_id = "00000000-0000-0000-0000-000000000000";
  EXPECT_EQ(check_process(other), Liveness::kGone);
}

TEST(ProcessLiveness, OtherHostIsUnknown) {
  ProcessIdentity other = current_process_identity();
  other.host = "some-other-host.invalid";
  EXPECT_EQ(check_process(other), Liveness::kUnknown);
}

TEST(ProcessLiveness, MissingPidIsGone) {
  ProcessIdentity p;
  p.pid = 0x3ffffff0;  // above pid_max on any Linux (4194304 at most)
  p.host = current_host_name();
  EXPECT_EQ(check_process(p), Liveness::kGone);
  EXPECT_FALSE(process_start_ticks(p.pid).has_value());
}

}  // namespace
}  // namespace spillway

#include "core/crc32c.h"

#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

namespace spillway {
namespace {

TEST(Crc32c, KnownVectors) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c_extend_portable(0, "123456789", 9), 0xE3069283u);
  EXPECT_EQ(crc32c("", 0), 0u);
  std::vector<uint8_t> zeros(32, 0), ones(32, 0xFF);
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);  // RFC 3720 B.4
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
}

TEST(Crc32c, HardwareMatchesPortableOnOddSizesAndOffsets) {
  std::mt19937 rng(1);
  std::vector<uint8_t> buf((1 << 20) + 100);
  for (auto& b : buf) b = static_cast<uint8_t>(rng());
  for (size_t start = 0; start < 9; ++start) {
    // Sizes around the three-stream stretches (3 x 256 and 3 x 8192 bytes) and well past them.
    for (size_t n :
         {0, 1, 7, 8, 9, 63, 767, 768, 769, 1000, 9991, 24575, 24576, 24577, 100003, 1 << 20}) {
      EXPECT_EQ(crc32c(buf.data() + start, n), crc32c_extend_portable(0, buf.data() + start, n))
          << start << " " << n;
    }
  }
  // Extending piecewise equals one pass.
  uint32_t c = crc32c_extend(0, buf.data(), 333);
  c = crc32c_extend(c, buf.data() + 333, buf.size() - 333);
  EXPECT_EQ(c, crc32c(buf.data(), buf.size()));
}

}  // namespace
}  // namespace spillway

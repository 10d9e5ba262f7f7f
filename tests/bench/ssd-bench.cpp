// bench-ssd: SSD store write and read throughput against dd with O_DIRECT on the same folder.
//
//   bench-ssd FOLDER [GIB=2] [BLOCK_MIB=1] [QUEUE_DEPTH=32]
//
// Writes GIB of random bytes into one group through the store (write_async in 256 MiB requests from
// 4096-aligned host memory, two requests outstanding, then flush() so fsync is inside the time),
// reads it back the same way (checksums verified), then runs `dd ... oflag=direct conv=fsync` and
// `dd ... iflag=direct` over a file of the same size, and prints both rates and store/dd.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "tiers/byte-size.h"
#include "tiers/host-pool.h"
#include "tiers/ssd-store.h"

using namespace spillway;

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Runs a shell command, returns seconds of wall time, or a negative value when it failed.
double timed_shell(const std::string& cmd) {
  const double t0 = now_s();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  if (!p) return -1;
  char line[512];
  std::string out;
  while (fgets(line, sizeof line, p)) out += line;
  const int rc = pclose(p);
  const double t = now_s() - t0;
  if (rc != 0) {
    std::fprintf(stderr, "command failed (%d): %s\n%s", rc, cmd.c_str(), out.c_str());
    return -1;
  }
  return t;
}

int fail(const Status& s) {
  std::fprintf(stderr, "bench-ssd: %s\n", s.to_string().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: %s FOLDER [GIB=2] [BLOCK_MIB=1] [QUEUE_DEPTH=32]\n", argv[0]);
    return 2;
  }
  const std::string folder = argv[1];
  const double gib = argc > 2 ? std::atof(argv[2]) : 2.0;
  const size_t block_mib = argc > 3 ? std::strtoul(argv[3], nullptr, 10) : 1;
  const unsigned depth = argc > 4 ? static_cast<unsigned>(std::strtoul(argv[4], nullptr, 10)) : 32;
  const size_t chunk = size_t{256} << 20;
  const uint64_t total = round_up(static_cast<uint64_t>(gib * (1ull << 30)), chunk);

  TierCounters counters;
  SsdConfig config;
  config.folder = folder + "/spillway-bench-ssd";
  config.block_bytes = block_mib << 20;
  config.queue_depth = depth;
  auto store = SsdStore::open(config, &counters);
  if (!store.ok()) return fail(store.status());
  SsdStore& s = **store;
  Status st = s.create_group("bench", total, Category::kOptimizer);
  if (!st.ok()) return fail(st);

  HostPool pool({.slab_bytes = 2 * chunk});
  std::vector<HostRegion> bufs;
  for (int i = 0; i < 2; ++i) {
    auto r = pool.allocate(chunk, Category::kWorkspace, "bench buffer");
    if (!r.ok()) return fail(r.status());
    std::mt19937_64 rng(i + 1);
    for (size_t k = 0; k < chunk / 8; ++k) r->as<uint64_t>()[k] = rng();
    bufs.push_back(std::move(*r));
  }

  std::printf("bench-ssd: %s in %s, block %s, queue depth %u, direct I/O %s\n",
              format_bytes(total).c_str(), config.folder.c_str(),
              format_bytes(config.block_bytes).c_str(), depth, s.direct_io() ? "on" : "off");

  // Two requests outstanding: while one completes the next is already queued.
  auto run = [&](bool write) -> Result<double> {
    const double t0 = now_s();
    std::vector<SsdRequestId> ids(2, 0);
    for (uint64_t off = 0, i = 0; off < total; off += chunk, ++i) {
      if (ids[i % 2]) SPW_RETURN_IF_ERROR(s.wait(ids[i % 2]));
      void* b = bufs[i % 2].data();
      SPW_ASSIGN_OR_RETURN(ids[i % 2], write ? s.write_async("bench", off, b, chunk)
                                             : s.read_async("bench", off, b, chunk));
    }
    SPW_RETURN_IF_ERROR(write ? s.flush() : s.wait_all());
    return now_s() - t0;
  };
  auto tw = run(true);
  if (!tw.ok()) return fail(tw.status());
  auto tr = run(false);
  if (!tr.ok()) return fail(tr.status());
  const double gb = total / 1e9;
  const double store_w = gb / *tw, store_r = gb / *tr;
  std::printf(
      "store  write %.2f GB/s (%.2f s, incl. fsync)   read %.2f GB/s (%.2f s, crc32c verified)\n",
      store_w, *tw, store_r, *tr);
  st = s.remove_group("bench");
  if (!st.ok()) return fail(st);
  store->reset();

  const std::string f = config.folder + "/dd-test";
  const uint64_t mib = total >> 20;
  const double dw = timed_shell("dd if=/dev/zero of=" + f + " bs=1M count=" + std::to_string(mib) +
                                " oflag=direct conv=fsync status=none");
  const double dr = timed_shell("dd if=" + f + " of=/dev/null bs=1M iflag=direct status=none");
  std::error_code ec;
  std::filesystem::remove_all(config.folder, ec);
  if (dw < 0 || dr < 0) return 1;
  const double dd_w = gb / dw, dd_r = gb / dr;
  std::printf(
      "dd     write %.2f GB/s (%.2f s, oflag=direct conv=fsync)   read %.2f GB/s (%.2f s, "
      "iflag=direct)\n",
      dd_w, dw, dd_r, dr);
  std::printf("store/dd   write %.2f   read %.2f\n", store_w / dd_w, store_r / dd_r);
  return 0;
}

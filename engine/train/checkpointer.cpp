#include "train/checkpointer.h"

#include <filesystem>

#include "train/checkpoint-parts.h"

namespace spillway {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

Checkpointer::Checkpointer(RunAssembly& run, RunReporter& report, int keep_checkpoints,
                           Clock::time_point started)
    : run_(run), report_(report), keep_(keep_checkpoints), started_(started) {}

Status Checkpointer::save(TrainerState& progress, bool manual) {
  // Every block's state on the host, the HBM tier's included (after the update in flight).
  const Status synced = run_.optimizer->sync_host();
  SPW_RETURN_IF_ERROR(report_.checkpointing(progress.step));
  const auto t0 = Clock::now();
  progress.data_cursor = run_.iter->cursor().to_json();
  progress.elapsed_s =
      run_.start.elapsed_s + std::chrono::duration<double>(Clock::now() - started_).count();
  SPW_RETURN_IF_ERROR(synced);
  const std::string checkpoints = (fs::path(report_.run_dir()) / "checkpoints").string();
  progress.manual = manual;
  progress.run_id = report_.run_id();
  auto saved = run_.machines() > 1
                   ? save_checkpoint_parts(checkpoints, *run_.state, progress, run_.opt_state.get(),
                                           *run_.processes)
                   : save_checkpoint(checkpoints, *run_.state, progress, run_.opt_state.get());
  progress.manual = false;
  SPW_ASSIGN_OR_RETURN(std::string dir, std::move(saved));
  last_saved_ = dir;
  if (run_.process() == 0) {
    for (const std::string& note : prune_checkpoints(checkpoints, keep_))
      report_.log(LogLevel::kWarn, note);
  }
  uint64_t bytes = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(dir, ec))
    bytes += e.is_regular_file() ? e.file_size() : 0;
  return report_.checkpointed(progress.step, dir, bytes,
                              std::chrono::duration<double>(Clock::now() - t0).count());
}

}  // namespace spillway

// spillway-worker: the headless engine process. All logic lives in worker/commands.*.
#include <unistd.h>

#include <cstdlib>
#include <exception>
#include <iostream>
#include <new>
#include <string>

#include "worker/commands.h"

namespace {

// OpenBLAS picks its GEMM kernels from CPUID when it is loaded, before main. On some virtual
// machines it misreads a modern Xeon as "Prescott" and runs SSE3 kernels at a tenth of the speed
// (15 GFLOP/s per core measured on the lent H100 host), and its idle threads spin long enough to
// slow the thread-pool ops between GEMMs. Both are environment settings read at load time, so the
// worker sets them from what the compiler's CPU detection sees and re-executes itself once.
void tune_openblas_and_reexec(char** argv) {
  if (std::getenv("SPILLWAY_WORKER_REEXEC")) return;
  bool changed = false;
  if (!std::getenv("OPENBLAS_CORETYPE")) {
    const char* core = __builtin_cpu_supports("avx512f") ? "SkylakeX"
                       : __builtin_cpu_supports("avx2")  ? "Haswell"
                                                         : nullptr;
    if (core) changed |= setenv("OPENBLAS_CORETYPE", core, 1) == 0;
  }
  if (!std::getenv("OPENBLAS_THREAD_TIMEOUT"))
    changed |= setenv("OPENBLAS_THREAD_TIMEOUT", "4", 1) == 0;
  if (!changed) return;
  setenv("SPILLWAY_WORKER_REEXEC", "1", 1);
  execv("/proc/self/exe", argv);  // on failure, carry on with the defaults
}

}  // namespace

int main(int argc, char** argv) {
  tune_openblas_and_reexec(argv);
  std::ios::sync_with_stdio(false);
  // Every reader returns a Status (core/json-file.h); this is the net under them, so that no input
  // can end the worker with an uncaught exception's abort and a core dump instead of a message.
  try {
    return spillway::worker::run_worker({argv + 1, argv + argc}, {std::cin, std::cout, std::cerr});
  } catch (const std::bad_alloc&) {
    std::cerr << "spillway-worker: out of memory: an allocation failed; lower the job's sizes "
                 "(spillway-worker plan "
                 "JOB.json says what fits)\n";
  } catch (const std::exception& e) {
    std::cerr << "spillway-worker: internal error: " << std::string(e.what()).substr(0, 300)
              << " (a bug: please report it with the command and its input files)\n";
  }
  return 1;
}

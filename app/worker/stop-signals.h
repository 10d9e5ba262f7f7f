// StopSignals: routes the signals that stop a worker command (SIGTERM from the app or `kill`,
// SIGINT from Ctrl-C) and, for `train`, SIGUSR1 (checkpoint now) to the trainer the command runs.
// The trainer stops at its next micro-batch or layer (Trainer::request_stop), so a stop takes
// effect within a bounded time even inside a long step.
//
// A command makes one before the work it may be asked to stop; a stop that comes before the
// trainer exists (while the model loads) is kept and passed on by attach(), and stop_signal()
// says which signal it was. The handlers are the process's: at most one StopSignals at a time;
// the destructor puts back the handlers it found. The handler only reads and writes lock-free
// atomics (async-signal-safe). A signal may be handled on any of the process's threads, so
// detach() waits for a handler still inside the trainer before the trainer may be destroyed.
// Not copyable; attach, detach and the destructor are called from one thread.
#pragma once

#include <signal.h>

namespace spillway {
class Trainer;
}

namespace spillway::worker {

class StopSignals {
 public:
  // Installs the handlers: SIGTERM and SIGINT stop; with `checkpoint_on_sigusr1`, SIGUSR1 asks
  // for a checkpoint (without it SIGUSR1 keeps its disposition).
  explicit StopSignals(bool checkpoint_on_sigusr1);
  ~StopSignals();
  StopSignals(const StopSignals&) = delete;
  StopSignals& operator=(const StopSignals&) = delete;

  // The trainer the signals go to from now on; a stop that came before is passed on at once.
  void attach(Trainer& trainer);
  // No trainer any more (call it before the trainer is destroyed); signals are still caught.
  void detach();

  // SIGTERM or SIGINT when a stop has come (the first), else 0.
  int stop_signal() const;

 private:
  bool checkpoint_on_sigusr1_;
  struct sigaction old_term_ {
  }, old_int_{}, old_usr1_{};
};

// "SIGTERM", "SIGINT", ...: a signal's name for a message.
const char* signal_name(int sig);

}  // namespace spillway::worker

#include "worker/stop-signals.h"

#include <atomic>
#include <thread>

#include "train/trainer.h"

namespace spillway::worker {
namespace {

std::atomic<Trainer*> g_trainer{nullptr};  // the attached trainer
std::atomic<int> g_stop_signal{0};         // the first stop signal, 0 when none
std::atomic<int> g_in_handler{0};          // handlers between reading g_trainer and leaving it
static_assert(std::atomic<Trainer*>::is_always_lock_free && std::atomic<int>::is_always_lock_free,
              "the signal handler needs lock-free atomics");

void on_signal(int sig) {
  const bool stop = sig != SIGUSR1;
  if (stop) {
    int none = 0;
    g_stop_signal.compare_exchange_strong(none, sig);
  }
  // Counted before the pointer is read, so that detach(), which clears the pointer and then waits
  // for the count to drop, never lets the trainer go while a handler holds it.
  g_in_handler.fetch_add(1);
  if (Trainer* t = g_trainer.load()) {
    if (stop)
      t->request_stop();
    else
      t->request_checkpoint();  // request_* only store to atomics
  }
  g_in_handler.fetch_sub(1);
}

}  // namespace

StopSignals::StopSignals(bool checkpoint_on_sigusr1)
    : checkpoint_on_sigusr1_(checkpoint_on_sigusr1) {
  g_trainer.store(nullptr);
  g_stop_signal.store(0);
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGTERM, &sa, &old_term_);
  sigaction(SIGINT, &sa, &old_int_);
  if (checkpoint_on_sigusr1_) sigaction(SIGUSR1, &sa, &old_usr1_);
}

StopSignals::~StopSignals() {
  detach();
  sigaction(SIGTERM, &old_term_, nullptr);
  sigaction(SIGINT, &old_int_, nullptr);
  if (checkpoint_on_sigusr1_) sigaction(SIGUSR1, &old_usr1_, nullptr);
}

void StopSignals::attach(Trainer& trainer) {
  g_trainer.store(&trainer);
  // A stop that came before: a handler that read the pointer too early has set the flag, which
  // is read after the store (both sequentially consistent), so the trainer hears of it either way.
  if (g_stop_signal.load() != 0) trainer.request_stop();
}

void StopSignals::detach() {
  g_trainer.store(nullptr);
  while (g_in_handler.load() != 0) std::this_thread::yield();
}

int StopSignals::stop_signal() const {
  return g_stop_signal.load();
}

const char* signal_name(int sig) {
  switch (sig) {
    case SIGTERM:
      return "SIGTERM";
    case SIGINT:
      return "SIGINT";
    case SIGUSR1:
      return "SIGUSR1";
    default:
      return "a signal";
  }
}

}  // namespace spillway::worker

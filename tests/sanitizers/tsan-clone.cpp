// Linked into the test binaries of a ThreadSanitizer build (SPILLWAY_SANITIZE=thread) only.
//
// Qt 6 starts a QProcess with clone(CLONE_VM | CLONE_VFORK): the child runs on the parent's memory
// until it execs. clang 14's TSan intercepts clone and runs its fork bookkeeping in that child
// (ForkChildAfter), which then runs on the parent thread's own TSan state; when the parent returns
// from clone, ForkParentAfter finds the state already taken and TSan aborts the whole process:
//   ThreadSanitizer: CHECK failed: tsan_rtl.cpp:234 "((!thr->slot)) != (0)"
// on the first QProcess::start, from any thread, so no test that starts a worker can run. TSan's
// own vfork interceptor avoids the same problem by turning vfork into fork; this does the same for
// Qt's clone: a process-creating clone (CLONE_VM without CLONE_THREAD) loses CLONE_VM and
// CLONE_VFORK, so the child gets its own copy of memory and TSan's fork handling is right. Qt's
// child only execs or reports failure through a pipe, so QProcess behaves the same (started,
// FailedToStart, startDetached). Threads (CLONE_THREAD) pass through unchanged.
#include <sched.h>
#include <stdarg.h>
#include <sys/types.h>

// TSan's interceptor, which a plain clone() would have reached.
extern "C" int __interceptor_clone(int (*fn)(void*), void* stack, int flags, void* arg, ...);

extern "C" int clone(int (*fn)(void*), void* stack, int flags, void* arg, ...) {
  va_list ap;
  va_start(ap, arg);
  pid_t* parent_tid = va_arg(ap, pid_t*);
  void* tls = va_arg(ap, void*);
  pid_t* child_tid = va_arg(ap, pid_t*);
  va_end(ap);
  if ((flags & (CLONE_VM | CLONE_THREAD)) == CLONE_VM) flags &= ~(CLONE_VM | CLONE_VFORK);
  return __interceptor_clone(fn, stack, flags, arg, parent_tid, tls, child_tid);
}

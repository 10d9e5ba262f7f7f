// PoolTask: runs a function on Qt's global thread pool and brings its result back to the GUI
// thread, the way GpuProbe and DatasetPreviewLoader keep slow work off it.
//
// runOnPool(context, work, done) runs `work()` on QThreadPool::globalInstance(), then
// `done(result)` on the GUI thread (an event posted to a courier object there); when `context` is
// destroyed first, the result is dropped. The two hand-offs (the task's inputs to the pool thread,
// its result back) are annotated for ThreadSanitizer: they go through QThreadPool's and the event
// queue's locks, which live in the uninstrumented Qt libraries, so without the annotations TSan
// reported every input a task read and every result the GUI read as a data race (QtConcurrent::run
// and QFuture, whose templates run outside our annotations, reported the same), and a real race on
// a pool thread was lost among them. Thread-safety: call from the GUI thread; `work` must be safe
// on any thread and owns copies of what it reads. Ownership: the task owns `work` and `done` until
// it ends; a task still running when `context` goes finishes on the pool.
#pragma once

#include <QCoreApplication>
#include <QEvent>
#include <QObject>
#include <QPointer>
#include <QRunnable>
#include <QThreadPool>
#include <utility>

#if defined(__SANITIZE_THREAD__)
#define SPILLWAY_POOL_TASK_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define SPILLWAY_POOL_TASK_TSAN 1
#endif
#endif
#ifdef SPILLWAY_POOL_TASK_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace spillway::ui {
namespace pool_task_detail {

// What happened on one thread before release(p) happens before what follows acquire(p) on
// another (a no-op outside TSan builds, where the Qt locks already order them).
inline void release(void* p) {
#ifdef SPILLWAY_POOL_TASK_TSAN
  __tsan_release(p);
#else
  (void)p;
#endif
}
inline void acquire(void* p) {
#ifdef SPILLWAY_POOL_TASK_TSAN
  __tsan_acquire(p);
#else
  (void)p;
#endif
}

// A task's result on its way to the GUI thread. It is made on the pool thread and only touched
// again on the GUI thread (delivered, then deleted by Qt there), each time after acquire(this).
class ResultEvent : public QEvent {
 public:
  static QEvent::Type eventType() {
    static const QEvent::Type type = static_cast<QEvent::Type>(QEvent::registerEventType());
    return type;
  }
  ResultEvent() : QEvent(eventType()) {}
  virtual void deliver() = 0;
};

// Receives ResultEvents on the GUI thread; one for the application, made by the first runOnPool.
class Courier : public QObject {
 public:
  using QObject::QObject;
  static Courier* instance() {
    static Courier* courier = new Courier(QCoreApplication::instance());
    return courier;
  }
  bool event(QEvent* e) override {
    acquire(e);  // before the event's type or contents are read: they were written on the pool
    if (e->type() != ResultEvent::eventType()) return QObject::event(e);
    static_cast<ResultEvent*>(e)->deliver();
    return true;
  }
};

template <class Result, class Done>
class Delivery final : public ResultEvent {
 public:
  Delivery(QPointer<QObject> context, Done done, Result result)
      : context_(std::move(context)), done_(std::move(done)), result_(std::move(result)) {}
  ~Delivery() override { acquire(this); }  // also when it is dropped undelivered at exit
  void deliver() override {
    if (context_) done_(std::move(result_));
  }

 private:
  QPointer<QObject> context_;  // read on the GUI thread only, where its object lives
  Done done_;
  Result result_;
};

template <class Work, class Done>
class Task final : public QRunnable {
 public:
  Task(QObject* context, Work work, Done done)
      : courier_(Courier::instance()),
        context_(context),
        work_(std::move(work)),
        done_(std::move(done)) {
    setAutoDelete(true);
  }
  void run() override {
    acquire(this);  // paired with runOnPool's release: the inputs were written on the GUI thread
    using Result = decltype(work_());
    auto* delivery = new Delivery<Result, Done>(std::move(context_), std::move(done_), work_());
    release(delivery);
    QCoreApplication::postEvent(courier_, delivery);
  }

 private:
  Courier* courier_;
  QPointer<QObject> context_;
  Work work_;
  Done done_;
};

}  // namespace pool_task_detail

template <class Work, class Done>
void runOnPool(QObject* context, Work work, Done done) {
  auto* task = new pool_task_detail::Task<Work, Done>(context, std::move(work), std::move(done));
  pool_task_detail::release(task);
  QThreadPool::globalInstance()->start(task);
}

}  // namespace spillway::ui

// DatasetPreviewLoader: runs the New run page's dataset preview off the GUI thread. Every change
// of the dataset path, format, sequence length or model calls request(); the load starts once
// the requests pause for delay() ms (300 by default), so typing a path starts one load and not
// one per key. Each load runs DatasetPreview::load on Qt's thread pool (as GpuProbe does) and
// finished() brings the preview back to the GUI thread.
//
// Each request gets the next generation number; a newer request (or cancel()) sets the running
// load's cancellation flag, which DatasetPreview::load checks between chunks and tokens, and its
// result, if it still comes, is stale and dropped: finished() only ever carries the newest
// request's preview.
//
// Thread-safety: a GUI-thread object; only the load function runs elsewhere (it gets a copy of
// its request and its own flag, and must be safe to call from any thread, as
// DatasetPreview::load is). Ownership: owns its timer; a load still running when the object is
// destroyed is cancelled, ends on the pool (runOnPool, PoolTask.h) and its result is dropped.
#pragma once

#include <QObject>
#include <QTimer>
#include <atomic>
#include <functional>
#include <memory>

#include "DatasetPreview.h"

namespace spillway::ui {

class DatasetPreviewLoader : public QObject {
  Q_OBJECT
 public:
  // DatasetPreview::load's shape; tests pass a slow or blocking fake.
  using LoadFn = std::function<DatasetPreview(const DatasetPreview::Request&,
                                              const std::atomic<bool>& cancel)>;

  explicit DatasetPreviewLoader(QObject* parent = nullptr);
  DatasetPreviewLoader(LoadFn load, QObject* parent);
  ~DatasetPreviewLoader() override;

  // Schedules a preview of `request` after the pause and cancels the load in progress, if any.
  void request(DatasetPreview::Request request);
  // Cancels what is pending or running without a replacement (the path was cleared).
  void cancel();

  // Pending (waiting for the pause) or running.
  bool busy() const { return debounce_.isActive() || running_ != nullptr; }
  quint64 generation() const { return generation_; }
  int delay() const { return debounce_.interval(); }
  void setDelay(int ms) { debounce_.setInterval(ms); }
  int startedCount() const { return startedCount_; }  // loads started since construction
  int droppedCount() const { return droppedCount_; }  // stale results dropped

 signals:
  void started(quint64 generation);              // a load began on the pool
  void finished(const DatasetPreview& preview);  // the newest request's preview

 private:
  struct Job;
  void start();
  void cancelRunning();

  LoadFn load_;
  QTimer debounce_;
  DatasetPreview::Request pending_;
  quint64 generation_ = 0;
  std::shared_ptr<Job> running_;
  int startedCount_ = 0, droppedCount_ = 0;
};

}  // namespace spillway::ui

#include "DatasetPreviewLoader.h"

#include "PoolTask.h"

namespace spillway::ui {

struct DatasetPreviewLoader::Job {
  quint64 generation = 0;
  std::shared_ptr<std::atomic<bool>> cancel;  // shared with the task, which may outlive the job
};

DatasetPreviewLoader::DatasetPreviewLoader(QObject* parent)
    : DatasetPreviewLoader(
          [](const DatasetPreview::Request& r, const std::atomic<bool>& cancel) {
            return DatasetPreview::load(r, &cancel);
          },
          parent) {}

DatasetPreviewLoader::DatasetPreviewLoader(LoadFn load, QObject* parent)
    : QObject(parent), load_(std::move(load)) {
  debounce_.setSingleShot(true);
  debounce_.setInterval(300);
  connect(&debounce_, &QTimer::timeout, this, &DatasetPreviewLoader::start);
}

DatasetPreviewLoader::~DatasetPreviewLoader() {
  cancelRunning();
}

void DatasetPreviewLoader::request(DatasetPreview::Request request) {
  ++generation_;
  cancelRunning();
  pending_ = std::move(request);
  debounce_.start();
}

void DatasetPreviewLoader::cancel() {
  ++generation_;
  cancelRunning();
  debounce_.stop();
}

void DatasetPreviewLoader::cancelRunning() {
  if (!running_) return;
  running_->cancel->store(true, std::memory_order_relaxed);
  running_.reset();
}

void DatasetPreviewLoader::start() {
  auto job = std::make_shared<Job>();
  job->generation = generation_;
  job->cancel = std::make_shared<std::atomic<bool>>(false);
  running_ = job;
  pending_.generation = job->generation;
  // The task holds copies of the load function, its request and its flag: it may outlive this
  // object.
  runOnPool(
      this,
      [load = load_, request = pending_, cancel = job->cancel] { return load(request, *cancel); },
      [this, job](const DatasetPreview& preview) {
        if (running_ == job) running_.reset();
        if (job->generation != generation_ || preview.cancelled) {
          ++droppedCount_;  // a newer request came: this answer is stale
          return;
        }
        emit finished(preview);
      });
  ++startedCount_;
  emit started(job->generation);
}

}  // namespace spillway::ui

#include "RunEditQueue.h"

#include <QTimer>
#include <algorithm>
#include <utility>

#include "PoolTask.h"
#include "RunHistoryModel.h"
#include "RunLauncher.h"
#include "history/owned-files.h"
#include "history/run-store.h"

namespace spillway::ui {
namespace {

// How the store says another process holds the write lock (sqlite-util's file_problem for
// SQLITE_BUSY and SQLITE_LOCKED); the Status code alone (kIo) does not tell it from a read-only
// file or a full disk.
bool isLocked(const Status& s) {
  return s.message().find(" is locked by another process") != std::string::npos;
}

}  // namespace

RunEdit RunEdit::setTags(const std::string& id, const QString& name,
                         std::vector<std::string> tags) {
  RunEdit e;
  e.kind = kTags;
  e.runId = id;
  e.runName = name;
  e.tags = std::move(tags);
  return e;
}

RunEdit RunEdit::setNotes(const std::string& id, const QString& name, std::string notes) {
  RunEdit e;
  e.kind = kNotes;
  e.runId = id;
  e.runName = name;
  e.text = std::move(notes);
  return e;
}

RunEdit RunEdit::rename(const std::string& id, const QString& name, std::string newName) {
  RunEdit e;
  e.kind = kRename;
  e.runId = id;
  e.runName = name;
  e.text = std::move(newName);
  return e;
}

QString RunEdit::what() const {
  switch (kind) {
    case kTags:
      return QObject::tr("the tags of “%1”").arg(runName);
    case kNotes:
      return QObject::tr("the notes of “%1”").arg(runName);
    case kRename:
      return QObject::tr("the new name of “%1”").arg(runName);
    case kDelete:
      return QObject::tr("the deletion of “%1”").arg(runName);
  }
  return {};
}

RunEditQueue::RunEditQueue(QObject* parent) : QObject(parent) {}

RunEditQueue::~RunEditQueue() {
  // The app is closing with edits not written (a worker held the lock): one last try each, so
  // that an edit is lost only when the lock outlasts the connection's busy timeout.
  for (const Queued& q : queue_) (void)write(q.path, q.edit);
}

void RunEditQueue::submit(RunEdit edit) {
  if (path_.empty()) return;
  queue_.push_back({std::move(edit), path_});
  emit queued(queue_.back().edit);
  next();
}

bool RunEditQueue::deleting(const std::string& runId) const {
  return std::any_of(queue_.begin(), queue_.end(), [&](const Queued& q) {
    return q.edit.kind == RunEdit::kDelete && q.edit.runId == runId;
  });
}

void RunEditQueue::next() {
  if (inFlight_ || queue_.empty()) return;
  inFlight_ = true;
  ++attempts_;
  emit started(queue_.front().edit);
  runOnPool(
      this, [q = queue_.front()] { return write(q.path, q.edit); },
      [this](Outcome outcome) {
        inFlight_ = false;
        if (outcome.locked) {
          // Kept in front: tried again once the wait is over, each wait twice the last.
          waiting_ = true;
          const int wait = retryMs_;
          retryMs_ = std::min(retryMs_ * 2, kMaxRetryMs);
          emit waiting(queue_.front().edit, outcome.error, wait);
          QTimer::singleShot(wait, this, &RunEditQueue::next);
          return;
        }
        waiting_ = false;
        retryMs_ = kFirstRetryMs;
        RunEdit edit = std::move(queue_.front().edit);
        edit.kept = outcome.kept;
        queue_.pop_front();
        emit written(edit, outcome.error);
        next();
      });
}

RunEditQueue::Outcome RunEditQueue::write(const std::string& path, const RunEdit& edit) {
  Outcome out;
  auto store = RunStore::open(path, RunHistoryModel::connectionOptions());
  if (!store.ok()) {
    out.locked = isLocked(store.status());
    out.error = QString::fromStdString(store.status().message());
    return out;
  }
  RunStore& s = **store;
  Status st;
  switch (edit.kind) {
    case RunEdit::kTags:
      st = s.set_tags(edit.runId, edit.tags);
      break;
    case RunEdit::kNotes:
      st = s.set_notes(edit.runId, edit.text);
      break;
    case RunEdit::kRename:
      st = s.rename(edit.runId, edit.text);
      break;
    case RunEdit::kDelete:
      st = s.delete_run(edit.runId);
      break;
  }
  if (!st.ok()) {
    out.locked = isLocked(st);
    out.error = QString::fromStdString(st.message());
    return out;
  }
  if (edit.kind != RunEdit::kDelete) return out;
  // The rows are gone: now the run's files (checkpoints can be gigabytes, so here too), only
  // those Spillway wrote.
  QStringList failed;
  if (!edit.removeRunDir.isEmpty()) {
    const Removal r = remove_run_files(edit.removeRunDir.toStdString());
    for (const std::string& k : r.kept) out.kept << QString::fromStdString(k);
    for (const std::string& f : r.failed) failed << QString::fromStdString(f);
  }
  if (!edit.jobsDir.isEmpty()) {
    const RunLauncher::Removed launch = RunLauncher::removeLaunchFolder(edit.jobsDir, edit.runId);
    out.kept << launch.kept;
    failed << launch.failed;
  }
  if (!failed.isEmpty())
    out.error = QObject::tr("The run's row is gone, but these could not be removed: %1")
                    .arg(failed.join(", "));
  return out;
}

}  // namespace spillway::ui

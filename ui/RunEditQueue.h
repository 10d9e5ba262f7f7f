// RunEditQueue: the user's edits of the run store (a run's tags, notes, name, or its deletion with
// its files), written on a pool thread, one at a time in the order they were made, each through a
// connection of its own. A worker holds runs.db's write lock for as long as a transaction takes:
// an edit written on the window's thread froze it for the store's busy timeout and was then lost
// without a word. Here a locked store keeps the edit and tries it again, after 0.5 s, 1 s, 2 s ...
// up to every kMaxRetryMs, for as long as the lock is held (waiting() says so each time); an edit
// the store refuses for another reason (read-only, damaged, no such run) ends in written() with
// the store's message. Nothing is dropped while the queue lives; edits still queued when it is
// destroyed (the app closing) are tried once more, on the window's thread, each giving up after
// the connection's busy timeout.
//
// Thread-safety: GUI thread only; the pool work owns copies of the edit and the database path.
// Ownership: a QObject child of its owner (RunHistoryModel), which refreshes its rows after
// each written().
#pragma once

#include <QObject>
#include <QString>
#include <QStringList>
#include <deque>
#include <string>
#include <vector>

namespace spillway::ui {

struct RunEdit {
  enum Kind { kTags, kNotes, kRename, kDelete };
  Kind kind = kNotes;
  std::string runId;
  QString runName;                // for the messages: "the notes of “name”"
  std::vector<std::string> tags;  // kTags
  std::string text;               // kNotes: the notes; kRename: the new name
  // kDelete: after the rows go, the files Spillway wrote in the run folder `removeRunDir` (when
  // not empty; history/owned-files.h remove_run_files), and the run's launch folder under
  // `jobsDir` (RunLauncher::removeLaunchFolder). HistoryPage::deleteRun decides.
  QString removeRunDir;
  QString jobsDir;
  // Set once the deletion is written: the entries that stay because Spillway did not write them.
  QStringList kept;

  static RunEdit setTags(const std::string& id, const QString& name, std::vector<std::string> tags);
  static RunEdit setNotes(const std::string& id, const QString& name, std::string notes);
  static RunEdit rename(const std::string& id, const QString& name, std::string newName);
  // "the tags of “name”", "the deletion of “name”": what the status line names.
  QString what() const;
};

class RunEditQueue : public QObject {
  Q_OBJECT
 public:
  explicit RunEditQueue(QObject* parent = nullptr);
  ~RunEditQueue() override;

  // The database the next edits are written to (an edit keeps the path it was queued with).
  void setDatabase(const std::string& path) { path_ = path; }
  // Queues `edit`; it is written after the ones before it. No-op without a database.
  void submit(RunEdit edit);
  // Edits not written yet, the one being tried included.
  int pending() const { return static_cast<int>(queue_.size()); }
  // Whether a deletion of run `runId` is queued or being written: a second one would only fail
  // ("no such run") once the first lands, so History does not queue it.
  bool deleting(const std::string& runId) const;
  // Whether the edit in front waits for another process's write lock.
  bool waitingForLock() const { return waiting_; }
  // How many times an edit was tried (on a pool thread), for tests.
  int attempts() const { return attempts_; }

  static constexpr int kFirstRetryMs = 500;
  static constexpr int kMaxRetryMs = 8000;

 signals:
  void queued(const RunEdit& edit);   // `edit` was submitted
  void started(const RunEdit& edit);  // the edit in front is being written
  // The store is locked: `edit` is kept and tried again in `retryMs`. `message` is the store's.
  void waiting(const RunEdit& edit, const QString& message, int retryMs);
  // `edit` is written ("" error), or refused for good with `error` (a person can act on it).
  void written(const RunEdit& edit, const QString& error);

 private:
  struct Outcome {
    bool locked = false;
    QString error;
    QStringList kept;  // a deletion's entries that are not Spillway's
  };
  // Writes `edit` to the store at `path` through a new connection; any thread.
  static Outcome write(const std::string& path, const RunEdit& edit);
  void next();  // starts the edit in front, when none is in flight

  struct Queued {
    RunEdit edit;
    std::string path;
  };
  std::deque<Queued> queue_;
  std::string path_;
  bool inFlight_ = false, waiting_ = false;
  int retryMs_ = kFirstRetryMs;
  int attempts_ = 0;
};

}  // namespace spillway::ui

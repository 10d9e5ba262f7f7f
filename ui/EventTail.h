// EventTail: follows a run folder's events.jsonl as the worker appends to it, feeding complete
// lines into a RunSeries (a half-written last line waits for the next poll). Cheap to poll from a
// timer; owns nothing but its offset, its partial line and its counts. Not thread-safe.
//
// A damaged file never stops it: a line that is not an event (not a JSON object with a type:
// bytes a crash or a disk error left, or a line cut off by a worker killed mid-write) is skipped
// and counted, so that the page can say so; a "line" without a newline is kept only up to
// kMaxLineBytes (a file of garbage without newlines would otherwise grow it without bound).
#pragma once

#include <QByteArray>
#include <QString>

#include "RunSeries.h"

namespace spillway::ui {

class EventTail {
 public:
  // The longest line kept while it waits for its newline; a sample line is about 1.5 KB.
  static constexpr qsizetype kMaxLineBytes = 4 << 20;

  explicit EventTail(QString runDir = QString())
      : path_(runDir.isEmpty() ? QString() : runDir + "/events.jsonl") {}
  void reset(const QString& runDir);
  const QString& path() const { return path_; }
  // Reads what was appended since the last poll into `series`; returns the number of new events.
  int poll(RunSeries& series);
  // The worker is gone: a last line still waiting for its newline never gets one. It is applied
  // when it is a whole event, else counted as skipped (cut off). Returns the events applied (0 or
  // 1).
  int finish(RunSeries& series);
  // Lines skipped so far (since reset) and the 1-based line number of the first; 0 when none.
  int skipped() const { return skipped_; }
  qint64 firstSkippedLine() const { return firstSkipped_; }

 private:
  // Applies one complete line; counts it as skipped when it is not an event.
  bool take(RunSeries& series, const QByteArray& line);

  QString path_;
  qint64 offset_ = 0;
  QByteArray partial_;
  bool overlong_ = false;  // the current line passed kMaxLineBytes: dropped up to its newline
  qint64 lines_ = 0;       // complete lines read
  int skipped_ = 0;
  qint64 firstSkipped_ = 0;
};

}  // namespace spillway::ui

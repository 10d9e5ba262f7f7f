// EventTail: follows a run folder's events.jsonl as the worker appends to it, feeding complete
// lines into a RunSeries (a half-written last line waits for the next poll). Cheap to poll from a
// timer; owns nothing but its offset and partial line. Not thread-safe.
#pragma once

#include <QByteArray>
#include <QString>

#include "RunSeries.h"

namespace spillway::ui {

class EventTail {
 public:
  explicit EventTail(QString runDir = QString())
      : path_(runDir.isEmpty() ? QString() : runDir + "/events.jsonl") {}
  void reset(const QString& runDir);
  const QString& path() const { return path_; }
  // Reads what was appended since the last poll into `series`; returns the number of new events.
  int poll(RunSeries& series);

 private:
  QString path_;
  qint64 offset_ = 0;
  QByteArray partial_;
};

}  // namespace spillway::ui

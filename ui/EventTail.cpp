#include "EventTail.h"

#include <QFile>

namespace spillway::ui {

void EventTail::reset(const QString& runDir) {
  path_ = runDir.isEmpty() ? QString() : runDir + "/events.jsonl";
  offset_ = 0;
  partial_.clear();
  overlong_ = false;
  lines_ = 0;
  skipped_ = 0;
  firstSkipped_ = 0;
}

bool EventTail::take(RunSeries& series, const QByteArray& line) {
  ++lines_;
  if (line.isEmpty()) return false;
  if (series.apply(line)) return true;
  if (skipped_++ == 0) firstSkipped_ = lines_;
  return false;
}

int EventTail::poll(RunSeries& series) {
  if (path_.isEmpty()) return 0;
  QFile f(path_);
  if (!f.open(QIODevice::ReadOnly)) return 0;
  if (f.size() < offset_) {  // replaced: start over
    offset_ = 0;
    partial_.clear();
    overlong_ = false;
    lines_ = 0;
  }
  if (!f.seek(offset_)) return 0;
  QByteArray data = partial_ + f.readAll();
  offset_ = f.pos();
  int n = 0;
  qsizetype start = 0;
  for (qsizetype nl = data.indexOf('\n', start); nl >= 0; nl = data.indexOf('\n', start)) {
    if (overlong_) {  // the end of a line too long to keep: counted once, when it started
      overlong_ = false;
      ++lines_;
    } else if (take(series, data.mid(start, nl - start))) {
      ++n;
    }
    start = nl + 1;
  }
  partial_ = data.mid(start);
  if (!overlong_ && partial_.size() > kMaxLineBytes) {
    overlong_ = true;
    if (skipped_++ == 0) firstSkipped_ = lines_ + 1;
  }
  if (overlong_) partial_.clear();
  return n;
}

int EventTail::finish(RunSeries& series) {
  int n = 0;
  if (overlong_) {
    overlong_ = false;
    ++lines_;
  } else if (!partial_.isEmpty()) {
    n = take(series, partial_) ? 1 : 0;
  }
  partial_.clear();
  return n;
}

}  // namespace spillway::ui

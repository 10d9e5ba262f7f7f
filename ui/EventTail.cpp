#include "EventTail.h"

#include <QFile>

namespace spillway::ui {

void EventTail::reset(const QString& runDir) {
  path_ = runDir.isEmpty() ? QString() : runDir + "/events.jsonl";
  offset_ = 0;
  partial_.clear();
}

int EventTail::poll(RunSeries& series) {
  if (path_.isEmpty()) return 0;
  QFile f(path_);
  if (!f.open(QIODevice::ReadOnly)) return 0;
  if (f.size() < offset_) offset_ = 0, partial_.clear();  // replaced: start over
  if (!f.seek(offset_)) return 0;
  QByteArray data = partial_ + f.readAll();
  offset_ = f.pos();
  int n = 0;
  qsizetype start = 0;
  for (qsizetype nl = data.indexOf('\n', start); nl >= 0; nl = data.indexOf('\n', start)) {
    if (nl > start && series.apply(data.mid(start, nl - start))) ++n;
    start = nl + 1;
  }
  partial_ = data.mid(start);
  return n;
}

}  // namespace spillway::ui

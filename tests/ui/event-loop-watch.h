// EventLoopWatch: how long the GUI thread was blocked while a test watched it (issue 13 point 1:
// the window never blocks for more than 100 ms).
#pragma once

#include <QElapsedTimer>
#include <QObject>
#include <QTimer>
#include <algorithm>

namespace spillway::ui {

// The longest time, in ms, the event loop went without running a 5 ms timer while this lived.
class EventLoopWatch {
 public:
  EventLoopWatch() {
    timer_.setInterval(5);
    QObject::connect(&timer_, &QTimer::timeout, [this] {
      const qint64 now = clock_.elapsed();
      longest_ = std::max(longest_, now - last_);
      last_ = now;
    });
    clock_.start();
    timer_.start();
  }
  qint64 longestGapMs() const { return longest_; }

 private:
  QTimer timer_;
  QElapsedTimer clock_;
  qint64 last_ = 0, longest_ = 0;
};

}  // namespace spillway::ui

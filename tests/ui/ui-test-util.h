// What the GUI tests share: q() for the pages' QString arguments, and REQUIRE_WORKER() for the
// tests that drive the built worker (their target defines SPILLWAY_WORKER_BINARY).
#pragma once

#include <gtest/gtest.h>

#include <QFileInfo>
#include <QString>
#include <string>

namespace spillway::ui {

inline QString q(const std::string& s) {
  return QString::fromStdString(s);
}

}  // namespace spillway::ui

// Skips the test when the worker binary was not built.
#define REQUIRE_WORKER()                                 \
  if (!QFileInfo(SPILLWAY_WORKER_BINARY).isExecutable()) \
  GTEST_SKIP() << "no worker binary at " SPILLWAY_WORKER_BINARY

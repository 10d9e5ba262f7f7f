// waitForHistory: RunHistoryModel reads the run store on a pool thread (open() and refresh()); a
// test that reads its rows waits for that read first.
#pragma once

#include <QSignalSpy>

#include "RunHistoryModel.h"
#include "test-data.h"

namespace spillway::ui {

// True when `model` has no read in flight, or its read ended within 30 s (times kTimeScale).
inline bool waitForHistory(RunHistoryModel* model) {
  if (!model->loading()) return true;
  QSignalSpy refreshed(model, &RunHistoryModel::refreshed);
  return refreshed.wait(static_cast<int>(30000 * spillway::testing::kTimeScale));
}

}  // namespace spillway::ui

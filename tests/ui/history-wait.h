// waitForHistory, waitForEdits, waitForCompare: RunHistoryModel reads the run store on a pool
// thread (open() and refresh()), its edits are written on one (RunEditQueue), and Compare reads its
// runs on one (setRuns()); Live reads a run's row on one (attach() without a pid, a worker gone
// without last words: waitForLive); a test that reads what they bring waits for that work first.
#pragma once

#include <QElapsedTimer>
#include <QSignalSpy>

#include "ComparePage.h"
#include "LivePage.h"
#include "RunEditQueue.h"
#include "RunHistoryModel.h"
#include "test-data.h"

namespace spillway::ui {

// True when `model` has no read in flight, or its read ended within 30 s (times kTimeScale).
inline bool waitForHistory(RunHistoryModel* model) {
  if (!model->loading()) return true;
  QSignalSpy refreshed(model, &RunHistoryModel::refreshed);
  return refreshed.wait(static_cast<int>(30000 * spillway::testing::kTimeScale));
}

// True when every edit queued on `model` is written (or refused) and the read that follows it has
// ended, within 30 s (times kTimeScale).
inline bool waitForEdits(RunHistoryModel* model) {
  const int limit = static_cast<int>(30000 * spillway::testing::kTimeScale);
  QSignalSpy written(model->edits(), &RunEditQueue::written);
  QElapsedTimer clock;
  clock.start();
  while (model->edits()->pending() > 0 && clock.elapsed() < limit) written.wait(100);
  return model->edits()->pending() == 0 && waitForHistory(model);
}

// True when `page` has no read in flight, or its read ended within 30 s (times kTimeScale):
// Compare reads its runs on a pool thread after setRuns().
inline bool waitForCompare(ComparePage* page) {
  if (!page->loading()) return true;
  QSignalSpy loaded(page, &ComparePage::loaded);
  return loaded.wait(static_cast<int>(30000 * spillway::testing::kTimeScale));
}

// True when `page` has no read of the run store in flight, or its reads (one may follow another:
// attach()'s, then the one that decides how the run ended) ended within 30 s (times kTimeScale).
inline bool waitForLive(LivePage* page) {
  const int limit = static_cast<int>(30000 * spillway::testing::kTimeScale);
  QSignalSpy read(page, &LivePage::storeRead);
  QElapsedTimer clock;
  clock.start();
  while (page->storeBusy() && clock.elapsed() < limit) read.wait(100);
  return !page->storeBusy();
}

}  // namespace spillway::ui

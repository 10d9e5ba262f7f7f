// JobSettings: the New run page's form as a value — turned into the worker's job.json (schema in
// the README) and back (clone a run from History, open a job file). Keys the form does not show
// (beta2, eval_batches, keep_checkpoints, weight_slots, ...) ride along in `base`, so a clone
// keeps them. Defaults are the ones a first fine-tune of a small model wants. A plain value.
#pragma once

#include <QJsonObject>
#include <QString>

namespace spillway::ui {

struct JobSettings {
  QString name = "fine-tune";
  QString modelPath;
  QString trainPath;
  QString evalPath;
  double evalFraction = 0.1;
  QString format = "auto";
  QString chatTemplate = "auto";
  int seqLen = 256;
  bool shuffle = true;
  int steps = 200;
  int microBatchSize = 4;
  int gradAccum = 1;
  double lr = 1e-4;
  QString schedule = "cosine";
  int warmupSteps = 10;
  double weightDecay = 0.0;
  double clipGradNorm = 1.0;
  int evalEvery = 50;
  int checkpointEvery = 100;
  int seed = 0;
  QString backend = "auto";
  qint64 deviceMemoryBytes = 0;
  QString optimizerTier = "dram";
  QString masterTier = "dram";
  QString ssdDir;
  qint64 dramCapBytes = 0;
  QString runDir;
  QJsonObject base;  // the job this came from; toJson() writes the form's fields over it

  QJsonObject toJson() const;
  static JobSettings fromJson(const QJsonObject& job);
};

}  // namespace spillway::ui

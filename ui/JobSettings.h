// JobSettings: the New run page's form as a value — turned into the worker's job.json and back
// (clone a run from History, open a job file). Keys the form does not show (beta2, eval_batches,
// keep_checkpoints, weight_slots, ...) ride along in `base`, so a clone keeps them. Every default
// is the job schema's (engine/job/job-schema, through JobForm): a form left as it is runs what a
// job file that leaves the keys out runs. The job goes through nlohmann::json (the engine's JSON),
// not Qt's, whose numbers are doubles: a seed up to 2^64 - 1 (data.seed on the form, model.seed and
// train.seed in `base`) is read and written whole. A plain value.
#pragma once

#include <QByteArray>
#include <QJsonObject>
#include <QJsonValue>
#include <QString>
#include <nlohmann/json.hpp>

#include "JobForm.h"
#include "job/device-selection.h"

namespace spillway::ui {

struct JobSettings {
  QString name = "fine-tune";  // name is required: the form's starting text
  QString modelPath;
  QString tokenizerPath;  // model.tokenizer ("" : the model folder's); not on the form, kept from
                          // `base`
  QString trainPath;
  QString evalPath;
  double evalFraction = JobForm::defaultValue("data.eval_fraction").toDouble();
  QString format = JobForm::defaultValue("data.format").toString();
  QString chatTemplate = JobForm::defaultValue("data.template").toString();
  int seqLen = JobForm::defaultValue("data.seq_len").toInt();
  bool packing = JobForm::defaultValue("data.packing").toBool();  // instruction data packed
  bool shuffle = JobForm::defaultValue("data.shuffle").toBool();
  quint64 seed = static_cast<quint64>(
      JobForm::defaultValue("data.seed").toInteger());  // data.seed: the shuffle's
  int steps = JobForm::defaultValue("train.steps").toInt();
  double epochs = JobForm::defaultValue("train.epochs").toDouble();
  int microBatchSize = JobForm::defaultValue("train.micro_batch_size").toInt();
  int gradAccum = JobForm::defaultValue("train.grad_accum").toInt();
  double lr = JobForm::defaultValue("train.lr").toDouble();
  QString schedule = JobForm::defaultValue("train.schedule").toString();
  int warmupSteps = JobForm::defaultValue("train.warmup_steps").toInt();
  double weightDecay = JobForm::defaultValue("train.weight_decay").toDouble();
  double clipGradNorm = JobForm::defaultValue("train.clip_grad_norm").toDouble();
  int evalEvery = JobForm::defaultValue("train.eval_every").toInt();
  int checkpointEvery = JobForm::defaultValue("train.checkpoint_every").toInt();
  QString backend = JobForm::defaultValue("placement.backend").toString();
  qint64 deviceMemoryBytes = JobForm::defaultValue("placement.device_memory_bytes").toInteger();
  QString optimizerTier = JobForm::defaultValue("placement.optimizer").toString();
  QString masterTier = JobForm::defaultValue("placement.master").toString();
  QString ssdDir = JobForm::defaultValue("placement.ssd_dir").toString();
  qint64 dramCapBytes = JobForm::defaultValue("placement.dram_cap_bytes").toInteger();
  // placement.hbm_state_blocks: -1 as many as fit, 0 none, N the first N blocks.
  int hbmStateBlocks = JobForm::defaultValue("placement.hbm_state_blocks").toInt();
  // placement.devices: "all", the first N GPUs, or a list of CUDA indices (device-selection.h);
  // the schema's default, one GPU, when the job leaves it out or names something invalid.
  job::DeviceSelection devices = defaultDevices();
  QString runDir;
  nlohmann::json base = nlohmann::json::object();  // the job this came from; toJson() writes the
                                                   // form's fields over it

  // placement.devices' schema default as a selection.
  static job::DeviceSelection defaultDevices();

  // The model the job creates from `model.init` (a preset name or a config object, random
  // weights), kept from `base`: what the job trains when the form names no model folder.
  QJsonValue modelInit() const;
  // model.tokenizer as the job will have it: the job's own, except that one that came with a
  // model.init job is not carried over to a folder chosen in its place (that folder has its own).
  QString tokenizer() const;

  // `base`'s model section as Qt's JSON, for what only reads it (ModelPicker's model.init).
  QJsonObject baseModel() const;

  // The job: the form's fields over `base`.
  nlohmann::json toJson() const;
  // The job as the worker reads it: indented text, a newline at the end.
  QByteArray toText() const;
  // A job object's settings; anything else (a job that is not an object) gives the defaults.
  static JobSettings fromJson(const nlohmann::json& job);
  // `text` parsed as a job ({} when it is not JSON).
  static JobSettings fromText(const QByteArray& text);
};

}  // namespace spillway::ui

#include "JobSettings.h"

namespace spillway::ui {

namespace {

// `section` of `base` with `fields` written over it.
QJsonObject overlay(const QJsonObject& base, const char* section, const QJsonObject& fields) {
  QJsonObject out = base[section].toObject();
  for (auto it = fields.begin(); it != fields.end(); ++it) out[it.key()] = it.value();
  return out;
}

}  // namespace

QJsonValue JobSettings::modelInit() const {
  if (!modelPath.isEmpty()) return QJsonValue::Undefined;
  return base["model"].toObject()["init"];
}

QString JobSettings::tokenizer() const {
  const bool initJob = base["model"].toObject().contains("init");
  return !modelPath.isEmpty() && initJob ? QString() : tokenizerPath;
}

QJsonObject JobSettings::toJson() const {
  QJsonObject data = overlay(base, "data",
                             {{"train", trainPath},
                              {"format", format},
                              {"template", chatTemplate},
                              {"seq_len", seqLen},
                              {"packing", packing},
                              {"shuffle", shuffle},
                              {"seed", seed}});
  if (!evalPath.isEmpty()) {
    data["eval"] = evalPath;
    data.remove("eval_fraction");
  } else {
    data["eval_fraction"] = evalFraction;
    data.remove("eval");
  }
  const QJsonObject train = overlay(base, "train",
                                    {{"steps", steps},
                                     {"epochs", epochs},
                                     {"micro_batch_size", microBatchSize},
                                     {"grad_accum", gradAccum},
                                     {"lr", lr},
                                     {"schedule", schedule},
                                     {"warmup_steps", warmupSteps},
                                     {"weight_decay", weightDecay},
                                     {"clip_grad_norm", clipGradNorm},
                                     {"eval_every", evalEvery},
                                     {"checkpoint_every", checkpointEvery}});
  const QJsonObject placement = overlay(base, "placement",
                                        {{"backend", backend},
                                         {"device_memory_bytes", deviceMemoryBytes},
                                         {"optimizer", optimizerTier},
                                         {"master", masterTier},
                                         {"ssd_dir", ssdDir},
                                         {"dram_cap_bytes", dramCapBytes}});
  QJsonObject output = base["output"].toObject();
  if (!runDir.isEmpty())
    output["run_dir"] = runDir;
  else
    output.remove("run_dir");
  // A model made from a preset ("init") keeps its section when the form names no folder.
  QJsonObject model = modelPath.isEmpty() && base.contains("model")
                          ? base["model"].toObject()
                          : QJsonObject{{"path", modelPath}};
  if (!modelPath.isEmpty() && !tokenizer().isEmpty()) model["tokenizer"] = tokenizer();
  return QJsonObject{{"name", name},   {"model", model},         {"data", data},
                     {"train", train}, {"placement", placement}, {"output", output}};
}

JobSettings JobSettings::fromJson(const QJsonObject& j) {
  JobSettings s;  // the schema's defaults for whatever the job leaves out
  s.base = j;
  s.name = j["name"].toString(s.name);
  const QJsonObject m = j["model"].toObject(), d = j["data"].toObject(), t = j["train"].toObject(),
                    p = j["placement"].toObject();
  s.modelPath = m["path"].toString();
  s.tokenizerPath = m["tokenizer"].toString();
  s.trainPath = d["train"].toString();
  s.evalPath = d["eval"].toString();
  s.evalFraction = d["eval_fraction"].toDouble(s.evalFraction);
  s.format = d["format"].toString(s.format);
  s.chatTemplate = d["template"].toString(s.chatTemplate);
  s.seqLen = d["seq_len"].toInt(s.seqLen);
  s.packing = d["packing"].toBool(s.packing);
  s.shuffle = d["shuffle"].toBool(s.shuffle);
  s.seed = d["seed"].toInt(s.seed);
  s.steps = t["steps"].toInt(s.steps);
  s.epochs = t["epochs"].toDouble(s.epochs);
  s.microBatchSize = t["micro_batch_size"].toInt(s.microBatchSize);
  s.gradAccum = t["grad_accum"].toInt(s.gradAccum);
  s.lr = t["lr"].toDouble(s.lr);
  s.schedule = t["schedule"].toString(s.schedule);
  s.warmupSteps = t["warmup_steps"].toInt(s.warmupSteps);
  s.weightDecay = t["weight_decay"].toDouble(s.weightDecay);
  s.clipGradNorm = t["clip_grad_norm"].toDouble(s.clipGradNorm);
  s.evalEvery = t["eval_every"].toInt(s.evalEvery);
  s.checkpointEvery = t["checkpoint_every"].toInt(s.checkpointEvery);
  s.backend = p["backend"].toString(s.backend);
  s.deviceMemoryBytes = static_cast<qint64>(p["device_memory_bytes"].toDouble(s.deviceMemoryBytes));
  s.optimizerTier = p["optimizer"].toString(s.optimizerTier);
  s.masterTier = p["master"].toString(s.masterTier);
  s.ssdDir = p["ssd_dir"].toString(s.ssdDir);
  s.dramCapBytes = static_cast<qint64>(p["dram_cap_bytes"].toDouble(s.dramCapBytes));
  s.runDir = j["output"].toObject()["run_dir"].toString();
  return s;
}

}  // namespace spillway::ui

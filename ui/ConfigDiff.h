// ConfigDiff: the Compare page's table of job settings across runs — every leaf of the job JSON
// flattened to a dotted key ("train.lr"), one column per run, and whether the values differ. The
// jobs are read through nlohmann::json, so a 64-bit seed is shown and compared whole.
#pragma once

#include <QString>
#include <QStringList>
#include <QVector>

namespace spillway::ui {

struct ConfigDiffRow {
  QString key;
  QStringList values;  // one per run; "" when the run's job lacks the key
  bool differs = false;
};

// `jobs`: the runs' job JSON texts, in column order.
QVector<ConfigDiffRow> configDiff(const QStringList& jobs, bool differencesOnly);

}  // namespace spillway::ui

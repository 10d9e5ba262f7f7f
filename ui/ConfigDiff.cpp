#include "ConfigDiff.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>

namespace spillway::ui {
namespace {

void flatten(const QJsonValue& v, const QString& prefix, QMap<QString, QString>& out) {
  if (v.isObject()) {
    const QJsonObject o = v.toObject();
    for (auto it = o.begin(); it != o.end(); ++it)
      flatten(it.value(), prefix.isEmpty() ? it.key() : prefix + "." + it.key(), out);
  } else if (v.isArray()) {
    out[prefix] = QString::fromUtf8(QJsonDocument(v.toArray()).toJson(QJsonDocument::Compact));
  } else if (v.isDouble()) {
    out[prefix] = QString::number(v.toDouble(), 'g', 10);
  } else if (v.isBool()) {
    out[prefix] = v.toBool() ? "true" : "false";
  } else if (v.isNull()) {
    out[prefix] = "null";
  } else {
    out[prefix] = v.toString();
  }
}

}  // namespace

QVector<ConfigDiffRow> configDiff(const QStringList& jobs, bool differencesOnly) {
  QVector<QMap<QString, QString>> flat;
  QMap<QString, bool> keys;
  for (const QString& j : jobs) {
    QMap<QString, QString> m;
    flatten(QJsonDocument::fromJson(j.toUtf8()).object(), QString(), m);
    for (auto it = m.begin(); it != m.end(); ++it) keys[it.key()] = true;
    flat.push_back(m);
  }
  QVector<ConfigDiffRow> rows;
  for (auto it = keys.begin(); it != keys.end(); ++it) {
    ConfigDiffRow r;
    r.key = it.key();
    for (const auto& m : flat) r.values << m.value(r.key);
    for (const QString& v : r.values) r.differs |= v != r.values.first();
    if (!differencesOnly || r.differs) rows.push_back(r);
  }
  return rows;
}

}  // namespace spillway::ui

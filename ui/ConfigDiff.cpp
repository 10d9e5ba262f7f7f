#include "ConfigDiff.h"

#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QMap>
#include <cstdint>
#include <nlohmann/json.hpp>

namespace spillway::ui {
namespace {

// The job is read through nlohmann::json: Qt's JSON holds numbers as doubles, and two seeds past
// 2^53 that differ in their low bits read as one value (the row said they did not differ).
void flatten(const nlohmann::json& v, const QString& prefix, QMap<QString, QString>& out) {
  if (v.is_object()) {
    for (auto it = v.begin(); it != v.end(); ++it) {
      const QString key = QString::fromStdString(it.key());
      flatten(it.value(), prefix.isEmpty() ? key : prefix + "." + key, out);
    }
  } else if (v.is_array()) {
    // As Qt's compact JSON writes it, the way the table always showed arrays.
    const QByteArray text =
        QByteArray::fromStdString(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    out[prefix] = QString::fromUtf8(
        QJsonDocument(QJsonDocument::fromJson(text).array()).toJson(QJsonDocument::Compact));
  } else if (v.is_number()) {
    // Ten significant digits, except an integer a double does not hold (a 64-bit seed): whole.
    const bool wide = v.is_number_unsigned()  ? v.get<std::uint64_t>() > (std::uint64_t{1} << 53)
                      : v.is_number_integer() ? v.get<std::int64_t>() < -(std::int64_t{1} << 53)
                                              : false;
    out[prefix] =
        wide ? QString::fromStdString(v.dump()) : QString::number(v.get<double>(), 'g', 10);
  } else if (v.is_boolean()) {
    out[prefix] = v.get<bool>() ? "true" : "false";
  } else if (v.is_null()) {
    out[prefix] = "null";
  } else if (v.is_string()) {
    out[prefix] = QString::fromStdString(v.get<std::string>());
  } else {
    out[prefix] = QString();
  }
}

}  // namespace

QVector<ConfigDiffRow> configDiff(const QStringList& jobs, bool differencesOnly) {
  QVector<QMap<QString, QString>> flat;
  QMap<QString, bool> keys;
  for (const QString& j : jobs) {
    QMap<QString, QString> m;
    const nlohmann::json job =
        nlohmann::json::parse(j.toStdString(), nullptr, /*allow_exceptions=*/false);
    if (job.is_object()) flatten(job, QString(), m);
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

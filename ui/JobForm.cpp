#include "JobForm.h"

#include <QComboBox>
#include <QDoubleSpinBox>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QLineEdit>
#include <QSpinBox>
#include <algorithm>
#include <climits>
#include <cmath>
#include <limits>

#include "SpinBox.h"
#include "job/job-schema.h"

namespace spillway::ui {
namespace {

const job::JobKey* keyOf(const char* path) {
  return job::find_job_key(path);
}

QJsonValue toQt(const nlohmann::json& j) {
  if (j.is_null()) return QJsonValue();
  if (j.is_boolean()) return j.get<bool>();
  if (j.is_number_integer()) return static_cast<qint64>(j.get<int64_t>());
  if (j.is_number()) return j.get<double>();
  if (j.is_string()) return QString::fromStdString(j.get<std::string>());
  // Objects and arrays: through their text.
  const QJsonDocument doc = QJsonDocument::fromJson(QByteArray::fromStdString(j.dump()));
  return doc.isObject() ? QJsonValue(doc.object()) : QJsonValue(doc.array());
}

nlohmann::json fromQt(const QJsonValue& v) {
  switch (v.type()) {
    case QJsonValue::Bool:
      return v.toBool();
    case QJsonValue::Double: {
      const double d = v.toDouble();
      // QJsonValue keeps integers as doubles: an integral value goes back as a JSON integer.
      if (d == static_cast<double>(static_cast<qint64>(d))) return static_cast<int64_t>(d);
      return d;
    }
    case QJsonValue::String:
      return v.toString().toStdString();
    case QJsonValue::Null:
    case QJsonValue::Undefined:
      return nullptr;
    default:
      return nlohmann::json::parse(QJsonDocument(QJsonArray{v}).toJson().toStdString())[0];
  }
}

int clampToInt(double v) {
  return static_cast<int>(
      std::clamp(v, static_cast<double>(INT_MIN), static_cast<double>(INT_MAX)));
}

}  // namespace

QJsonValue JobForm::defaultValue(const char* path) {
  const job::JobKey* k = keyOf(path);
  return k ? toQt(k->default_value) : QJsonValue();
}

QString JobForm::allowed(const char* path) {
  const job::JobKey* k = keyOf(path);
  if (!k || (k->type != job::KeyType::kInteger && k->type != job::KeyType::kNumber))
    return QString();
  return QString::fromStdString(k->allowed());
}

double JobForm::minimum(const char* path) {
  const job::JobKey* k = keyOf(path);
  return k ? k->range.lo : 0;
}

double JobForm::maximum(const char* path) {
  const job::JobKey* k = keyOf(path);
  return k ? k->range.hi : 0;
}

QString JobForm::toolTip(const char* path) {
  const job::JobKey* k = keyOf(path);
  if (!k) return QString();
  QString tip = QString::fromStdString(k->description) + "\n" + QString::fromStdString(k->path);
  if (!k->required && !k->default_value.is_null()) {
    const QJsonValue d = toQt(k->default_value);
    tip += " · default " + (d.isString() ? (d.toString().isEmpty() ? "empty" : d.toString())
                                         : QString::fromStdString(k->default_value.dump()));
  }
  if (k->type == job::KeyType::kInteger || k->type == job::KeyType::kNumber ||
      k->type == job::KeyType::kChoice)
    tip += " · " + QString::fromStdString(k->allowed());
  // placement.devices has no range: the forms of its value instead (device-selection.h).
  if (k->type == job::KeyType::kDevices)
    tip += QObject::tr(" · \"all\", a count of GPUs or a list of GPU indices");
  return tip;
}

QString JobForm::check(const char* path, const QJsonValue& value) {
  const job::JobKey* k = keyOf(path);
  if (!k) return QString("unknown job key %1").arg(path);
  const Status st = job::check_value(*k, fromQt(value));
  return st.ok() ? QString() : QString::fromStdString(st.message());
}

void JobForm::bind(QWidget* field, const char* path) {
  field->setProperty(kKeyProperty, QString::fromLatin1(path));
  field->setToolTip(toolTip(path));
}

QSpinBox* JobForm::spinBox(const char* path, int maxShown) {
  auto* s = new SpinBox;
  s->setRange(clampToInt(minimum(path)), maxShown > 0 ? maxShown : clampToInt(maximum(path)));
  s->setValue(defaultValue(path).toInt());
  bind(s, path);
  return s;
}

IntegerSpinBox* JobForm::integerSpinBox(const char* path) {
  auto* s = new IntegerSpinBox;
  // The bounds are whole numbers; 2^64 - 1, the top of a seed's range, is 2^64 as a double.
  const double hi = maximum(path);
  s->setRange(static_cast<quint64>(std::max(minimum(path), 0.0)),
              hi >= 0x1p64 ? std::numeric_limits<quint64>::max() : static_cast<quint64>(hi));
  s->setValue(static_cast<quint64>(std::max<qint64>(defaultValue(path).toInteger(), 0)));
  bind(s, path);
  return s;
}

QDoubleSpinBox* JobForm::doubleSpinBox(const char* path, int decimals, double scale) {
  auto* s = new DoubleSpinBox;
  s->setDecimals(decimals);
  const job::JobKey* k = keyOf(path);
  // An open bound is shown as the nearest value the field can hold inside it.
  const double step = std::pow(10.0, -decimals);
  double lo = minimum(path) * scale, hi = maximum(path) * scale;
  if (k && k->range.lo_open) lo += step;
  if (k && k->range.hi_open) hi -= step;
  s->setRange(lo, std::min(hi, 1e15));
  s->setValue(defaultValue(path).toDouble() * scale);
  bind(s, path);
  return s;
}

QComboBox* JobForm::comboBox(const char* path) {
  auto* c = new QComboBox;
  if (const job::JobKey* k = keyOf(path)) {
    for (const std::string& choice : k->choices) c->addItem(QString::fromStdString(choice));
  }
  c->setCurrentText(defaultValue(path).toString());
  bind(c, path);
  return c;
}

QLineEdit* JobForm::lineEdit(const char* path) {
  auto* e = new QLineEdit;
  const QJsonValue d = defaultValue(path);
  if (d.isString()) e->setText(d.toString());
  bind(e, path);
  return e;
}

}  // namespace spillway::ui

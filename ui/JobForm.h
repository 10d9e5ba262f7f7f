// JobForm: the New run form's fields made from the job schema (engine/job/job-schema), so that the
// form and the worker cannot disagree. Each field starts at its key's default, takes the key's
// range or choices, carries a tooltip made of the key's description, default and range, and names
// its key in the Qt property "jobKey" (ui_tests checks every field of the form against the schema).
// Static functions only; GUI thread (they make widgets), except the value helpers.
#pragma once

#include <QJsonValue>
#include <QString>
#include <QtGlobal>

#include "IntegerSpinBox.h"

class QComboBox;
class QDoubleSpinBox;
class QLineEdit;
class QSpinBox;
class QWidget;

namespace spillway::ui {

class JobForm {
 public:
  static constexpr const char* kKeyProperty = "jobKey";
  // Set (true) on an input of the page that is not part of the job, such as Measure's step count:
  // it has no key, and the check that every field has one passes it by.
  static constexpr const char* kNotInJobProperty = "notInJob";

  // The schema's default of `path` ("train.lr") as JSON (null for required keys and keys left
  // unset); an unknown path is a programming error and gives null.
  static QJsonValue defaultValue(const char* path);
  // "[1, 65536]", "(0, 10]"; "" for a key without a range.
  static QString allowed(const char* path);
  // The schema's bounds of a numeric key.
  static double minimum(const char* path);
  static double maximum(const char* path);
  // The description, then "train.lr · default 0.0001 · (0, 10]".
  static QString toolTip(const char* path);
  // Why `value` is not a valid `path` ("job.json: train.lr must be in (0, 10], got 11"), or "".
  static QString check(const char* path, const QJsonValue& value);

  // Fields. The spin boxes refuse text that is not a value of their range, and say why (SpinBox).
  // An integer key's spin box takes the key's range clamped to int, or [min, `maxShown`]
  // when `maxShown` > 0 (so that a value past the range can be typed and refused with a message).
  static QSpinBox* spinBox(const char* path, int maxShown = 0);
  // An integer key whose range passes int (a seed): its whole range, up to 2^64 - 1 (the job is
  // read and written through nlohmann::json, which holds it whole: JobSettings).
  static IntegerSpinBox* integerSpinBox(const char* path);
  // A number shown in a unit `scale` times the key's (bytes shown in GB: scale 1e-9).
  static QDoubleSpinBox* doubleSpinBox(const char* path, int decimals, double scale = 1.0);
  // The key's choices, its default selected.
  static QComboBox* comboBox(const char* path);
  static QLineEdit* lineEdit(const char* path);
  // Names `path` in the "jobKey" property of a field made elsewhere, and gives it the tooltip.
  static void bind(QWidget* field, const char* path);
};

}  // namespace spillway::ui

#include "Format.h"

#include <cmath>

namespace spillway::ui {

QString formatBytes(double bytes) {
  if (bytes < 0 || std::isnan(bytes)) return QStringLiteral("—");
  const char* units[] = {"B", "kB", "MB", "GB", "TB"};
  int u = 0;
  // 999,960 B is "1.00 MB", not "1000.0 kB": move up where the rounded figure would reach 1000.
  while (bytes >= (u == 0 ? 999.5 : 999.95) && u < 4) bytes /= 1000, ++u;
  return u == 0 ? QString("%1 B").arg(bytes, 0, 'f', 0)
                : QString("%1 %2").arg(bytes, 0, 'f', bytes < 10 ? 2 : 1).arg(units[u]);
}

QString formatDuration(double s) {
  if (s < 0 || std::isnan(s) || std::isinf(s)) return QStringLiteral("—");
  if (s < 0.1) return QString("%1 ms").arg(s * 1e3, 0, 'f', s < 0.01 ? 2 : 1);
  if (s < 60) return QString("%1 s").arg(s, 0, 'f', s < 10 ? 2 : 1);
  const long t = std::lround(s);
  if (t < 3600) return QString("%1 min %2 s").arg(t / 60).arg(t % 60, 2, 10, QChar('0'));
  return QString("%1 h %2 min").arg(t / 3600).arg((t % 3600) / 60, 2, 10, QChar('0'));
}

QString formatCount(double n) {
  if (n >= 1e9) return QString("%1 B").arg(n / 1e9, 0, 'f', 2);
  if (n >= 1e6) return QString("%1 M").arg(n / 1e6, 0, 'f', 1);
  if (n >= 1e3) return QString("%1 k").arg(n / 1e3, 0, 'f', 1);
  return QString::number(n);
}

ByteUnit byteUnitFor(double maxBytes) {
  if (maxBytes >= 1e12) return {1e12, "TB"};
  if (maxBytes >= 1e9) return {1e9, "GB"};
  if (maxBytes >= 1e6) return {1e6, "MB"};
  return {1e3, "kB"};
}

QString breakablePaths(QString text) {
  return text.replace('/', QStringLiteral("/\u200B"));
}

}  // namespace spillway::ui

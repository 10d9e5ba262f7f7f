// Small formatting helpers shared by the pages: bytes, durations, rates (decimal units, as the
// worker's events use: 1 GB = 10^9 bytes).
#pragma once

#include <QString>

namespace spillway::ui {

QString formatBytes(double bytes);       // "1.23 GB", "512 MB", "—" for a negative value
QString formatDuration(double seconds);  // "1 h 02 min", "3 min 05 s", "12.3 s", "1.25 s", "8.4 ms"
QString formatCount(double n);           // "58.1 M", "260 k"

// A decimal byte unit that suits values up to `maxBytes`: its size in bytes and its name
// ({1e9, "GB"} for 3e9, {1e6, "MB"} for 4e6); at least kB, at most TB.
struct ByteUnit {
  double bytes;
  QString name;
};
ByteUnit byteUnitFor(double maxBytes);

// `text` for a word-wrapped QLabel: a zero-width space after each '/' of a long path, so that a
// message naming a path wraps inside the window instead of widening the page (QLabel breaks lines
// only between words).
QString breakablePaths(QString text);

}  // namespace spillway::ui

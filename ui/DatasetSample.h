// DatasetSample: the first bytes of a dataset file, for the New run page's preview — a bounded
// read, so that a 55 MB file costs what a 1 MB one does. The cut falls on a record boundary: after
// the last whole line for JSON lines and plain text (a UTF-8 character boundary when a text has no
// line break), before the last complete element of a JSON list, which is then closed with ']'. Line
// numbers in the sample are those of the file, so "FILE:LINE" messages stay true.
//
// It also refuses what is not text: a NUL byte, a known binary signature (gzip, zip, zstd, xz,
// Parquet, Arrow), UTF-16, or a head where over 10% of the bytes are control characters or invalid
// UTF-8. The engine's reader would take such a file as text and train on its bytes.
//
// Thread-safety: read() has no shared state and may run on any thread; it checks `cancel` between
// chunks of 256 kB. Results are plain values owned by the caller.
#pragma once

#include <QByteArray>
#include <QString>
#include <atomic>

namespace spillway::ui {

struct DatasetSample {
  QString error;  // the file cannot be read or is not text; empty when ok
  bool cancelled = false;
  QByteArray bytes;  // the sample: the file's first bytes, cut at a record boundary
  qint64 fileBytes = 0;
  qint64 readBytes = 0;  // bytes of the file the sample covers (bytes may end with an added ']')
  bool whole = true;     // the sample is the whole file

  bool ok() const { return error.isEmpty() && !cancelled; }

  // Reads `path` up to `limit` bytes, or further only to finish the one record that crosses the
  // limit. `json`: cut at JSON record boundaries (the engine reads the file as JSON); else as text.
  static DatasetSample read(const QString& path, qint64 limit, bool json,
                            const std::atomic<bool>* cancel = nullptr);

  // Why `head` (a file's first bytes) is not UTF-8 text, or "" when it is. `name` starts the
  // message.
  static QString notTextReason(const QByteArray& head, const QString& name);
};

}  // namespace spillway::ui

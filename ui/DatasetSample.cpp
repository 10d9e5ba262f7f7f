#include "DatasetSample.h"

#include <QFile>
#include <QFileInfo>
#include <QObject>
#include <algorithm>

#include "Format.h"
#include "data/text-check.h"

namespace spillway::ui {
namespace {

constexpr qint64 kChunk = 256 * 1024;
constexpr qsizetype kHead =
    static_cast<qsizetype>(kTextCheckBytes);  // what the text check looks at

bool stopRequested(const std::atomic<bool>* cancel) {
  return cancel && cancel->load(std::memory_order_relaxed);
}

// Finds the element boundaries of a top-level JSON list as bytes arrive: the position of each ','
// between two elements, and of the closing ']'. Strings are skipped with their escapes, so brackets
// and commas inside them do not count.
struct JsonListScanner {
  qsizetype pos = 0;
  int depth = 0;
  bool inString = false, escape = false;
  qsizetype lastComma = -1;  // the last ',' at depth 1
  qsizetype close = -1;      // the ']' that closes the list
  bool firstComma = false;   // stop at the next ',' (reading past the limit)

  void scan(const QByteArray& s) {
    for (; pos < s.size() && close < 0; ++pos) {
      const char c = s[pos];
      if (inString) {
        if (escape)
          escape = false;
        else if (c == '\\')
          escape = true;
        else if (c == '"')
          inString = false;
      } else if (c == '"') {
        inString = true;
      } else if (c == '[' || c == '{') {
        ++depth;
      } else if (c == ']' || c == '}') {
        if (--depth == 0) close = pos;
      } else if (c == ',' && depth == 1) {
        lastComma = pos;
        if (firstComma) return;
      }
    }
  }
};

}  // namespace

QString DatasetSample::notTextReason(const QByteArray& head, const QString& name) {
  return QString::fromStdString(not_text_reason(
      std::string_view(head.constData(), static_cast<size_t>(head.size())), name.toStdString()));
}

DatasetSample DatasetSample::read(const QString& path, qint64 limit, bool json,
                                  const std::atomic<bool>* cancel) {
  DatasetSample s;
  const QFileInfo info(path);
  if (!info.exists()) return s.error = QObject::tr("%1 does not exist.").arg(path), s;
  if (info.isDir()) return s.error = QObject::tr("%1 is a folder, not a file.").arg(path), s;
  // Before opening: opening a FIFO would wait for a writer, and a device may never end.
  if (!info.isFile())
    return s.error = QObject::tr("%1 is not a regular file (a FIFO, socket or device).").arg(path),
           s;
  QFile f(path);
  if (!f.open(QIODevice::ReadOnly))
    return s.error = QObject::tr("Cannot open %1: %2").arg(path, f.errorString()), s;
  s.fileBytes = f.size();

  QByteArray buf;
  bool eof = false;
  auto readChunk = [&](qint64 most) {
    if (stopRequested(cancel)) return s.cancelled = true, false;
    const QByteArray chunk = f.read(std::min(most, kChunk));
    if (chunk.isEmpty()) {
      eof = true;
      if (f.error() != QFileDevice::NoError)
        s.error = QObject::tr("Cannot read %1: %2").arg(path, f.errorString());
      return false;
    }
    buf += chunk;
    return true;
  };
  while (buf.size() < limit && readChunk(limit - buf.size())) {
  }
  if (!s.error.isEmpty() || s.cancelled) return s;
  if (const QString why = notTextReason(buf.left(kHead), path); !why.isEmpty())
    return s.error = why, s;
  if (eof || buf.size() >= s.fileBytes) {
    s.bytes = std::move(buf);
    s.readBytes = s.bytes.size();
    return s;
  }

  // Cut at a record boundary, reading on only while the record that crosses the limit lasts.
  qsizetype first = buf.startsWith("\xEF\xBB\xBF") ? 3 : 0;
  while (first < buf.size() && QByteArray(" \t\r\n").contains(buf[first])) ++first;
  qsizetype cut = -1;
  QByteArray closing;
  if (json && first < buf.size() && buf[first] == '[') {
    JsonListScanner scanner;
    scanner.pos = first;
    for (;;) {
      scanner.scan(buf);
      if (scanner.close >= 0) {
        cut = scanner.close + 1;
        break;
      }
      if (scanner.lastComma >= 0) {
        cut = scanner.lastComma;
        closing = "]";
        break;
      }
      scanner.firstComma = true;
      if (!readChunk(kChunk)) break;
    }
  } else {
    for (qsizetype from = -1;;) {
      // The last line break within the limit, else the first one after it.
      const qsizetype nl = from < 0 ? buf.lastIndexOf('\n') : buf.indexOf('\n', from);
      if (nl >= 0) {
        cut = nl + 1;
        break;
      }
      if (!json) {
        cut =
            static_cast<qsizetype>(utf8_prefix({buf.constData(), static_cast<size_t>(buf.size())}));
        break;
      }
      from = buf.size();
      if (!readChunk(kChunk)) break;
    }
  }
  if (!s.error.isEmpty() || s.cancelled) return s;
  if (cut < 0 || (eof && cut >= buf.size())) {  // the record ran to the end of the file
    s.bytes = std::move(buf);
    s.readBytes = s.bytes.size();
    return s;
  }
  s.bytes = buf.left(cut) + closing;
  s.readBytes = cut;
  s.whole = cut >= s.fileBytes;
  return s;
}

}  // namespace spillway::ui

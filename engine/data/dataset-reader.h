// Dataset reader: one file on disk -> a list of records (documents, conversations or token id
// lists), before any tokenization.
//
// Formats: plain text (.txt and anything not JSON), JSON/JSONL records with `text`, Alpaca
// (`instruction`, `input`, `output`, optional `system` and `history`; Stanford seed tasks with
// `instances`), ShareGPT (`conversations` of {from, value}), OpenAI (`messages` of {role,
// content}) and pre-tokenized (`input_ids`, optional `labels`). A .json file may hold a list of
// records, one object, or one object a line; .jsonl/.ndjson hold one object a line. The format is
// detected from the extension and the first record's keys unless set.
//
// Every malformed record is reported as "FILE:LINE: what is wrong" (the line where the record
// starts, 1-based). By default the first one fails the read; with `skip_bad_records` they are
// counted, the first few kept for the report, and the rest of the file is read.
//
// Functions are thread-safe (no shared state); results are plain values owned by the caller.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "data/chat-template.h"

namespace spillway {

enum class DatasetFormat {
  kAuto,
  kText,            // plain text file, split into documents by TextSplit
  kJsonText,        // {"text": ...}
  kAlpaca,          // {"instruction", "input", "output"}
  kShareGpt,        // {"conversations": [{"from", "value"}]}
  kOpenAiMessages,  // {"messages": [{"role", "content"}]}
  kPreTokenized,    // {"input_ids": [...], "labels": [...]?}
};

// "auto", "text", "json-text", "alpaca", "sharegpt", "openai", "pretokenized".
const char* dataset_format_name(DatasetFormat format);
// The names above plus aliases ("txt", "jsonl", "messages", "tokenized"). kInvalidArgument lists
// them.
Result<DatasetFormat> parse_dataset_format(std::string_view name);

// How a plain-text file becomes documents (EOS goes between documents when packing).
enum class TextSplit {
  kAuto,        // kEndOfText when the file contains "<|endoftext|>", else kWholeFile
  kWholeFile,   // the file is one document (tinyshakespeare)
  kLines,       // each non-blank line is a document (wiki_demo.txt: one article a line)
  kParagraphs,  // blank-line separated blocks
  kEndOfText,   // split on the literal "<|endoftext|>" (TinyStories)
};

const char* text_split_name(TextSplit split);
Result<TextSplit> parse_text_split(std::string_view name);

// One record. Which fields are set depends on the format: `text` for kText / kJsonText,
// `messages` for the chat formats (Alpaca becomes user + assistant messages), `input_ids` /
// `labels` for kPreTokenized.
struct DatasetRecord {
  int64_t line = 0;  // 1-based line where the record starts in the file
  std::string text;
  std::vector<ChatMessage> messages;
  // The same conversation in transformers' chat format, for the model's own Jinja template: a JSON
  // list of {role: system|user|assistant|tool, content, tool_calls?} (OpenAI records as written;
  // ShareGPT's function_call as an assistant message with tool_calls, its observation as a tool
  // message), and the record's tools as a JSON list of {type: function, function: schema}, empty
  // when it has none.
  std::string chat_messages_json;
  std::string chat_tools_json;
  // Pre-tokenized, in the Hugging Face convention: labels aligned with input_ids (the model
  // shifts), -100 ignored; empty labels mean "same as input_ids".
  std::vector<int32_t> input_ids;
  std::vector<int32_t> labels;
};

// `messages` in transformers' chat format (a JSON list, as chat_messages_json), for a record made
// without the reader.
std::string chat_messages_json_of(const std::vector<ChatMessage>& messages);

// "FILE:LINE: reason".
struct RecordIssue {
  std::string file;
  int64_t line = 0;
  std::string reason;
  std::string to_string() const;
};

// Collects bad-record reports for a reader or tokenizer pass. With skip off, the first issue is
// the error to return; with skip on, issues are counted and the first `max_kept` kept.
class IssueLog {
 public:
  IssueLog(std::string file, bool skip, size_t max_kept)
      : file_(std::move(file)), skip_(skip), max_kept_(max_kept) {}
  // Returns ok when the record may be skipped, else the kInvalidArgument to fail with.
  Status report(int64_t line, std::string reason);
  int64_t count() const { return count_; }
  const std::vector<RecordIssue>& kept() const { return kept_; }
  const std::string& file() const { return file_; }

 private:
  std::string file_;
  bool skip_;
  size_t max_kept_;
  int64_t count_ = 0;
  std::vector<RecordIssue> kept_;
};

struct ReadOptions {
  DatasetFormat format = DatasetFormat::kAuto;
  TextSplit text_split = TextSplit::kAuto;
  bool skip_bad_records = false;
  size_t max_reported_issues = 20;
};

struct DatasetRecords {
  DatasetFormat format = DatasetFormat::kAuto;  // as detected or set
  TextSplit text_split = TextSplit::kAuto;      // as resolved, for kText
  std::vector<DatasetRecord> records;
  int64_t skipped = 0;              // bad records left out (skip_bad_records)
  std::vector<RecordIssue> issues;  // the first max_reported_issues of them
};

// The format of `path` from its extension and, for JSON, its first record's keys. kNotFound
// for a missing file; kInvalidArgument naming the first record's line and keys when no format
// fits.
Result<DatasetFormat> detect_dataset_format(const std::string& path);

// Reads every record of `path`. Errors: kNotFound / kIo for the file; kInvalidArgument
// "FILE:LINE: reason" for the first malformed record (unless skipping) or for a file with no
// usable record.
Result<DatasetRecords> read_dataset_records(const std::string& path, const ReadOptions& options);

// As above, from text already in memory; `name` is used in messages and for the extension.
Result<DatasetRecords> parse_dataset_records(std::string_view content, const std::string& name,
                                             const ReadOptions& options);

}  // namespace spillway

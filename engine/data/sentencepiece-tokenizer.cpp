#include "data/sentencepiece-tokenizer.h"

#include <sentencepiece_processor.h>

#include <exception>
#include <filesystem>
#include <optional>

#include "core/file-util.h"
#include "data/tokenizer-unicode.h"

namespace spillway {

namespace {

// Protocol-buffer wire format, just enough to rewrite one bool of the ModelProto.
bool read_varint(std::string_view s, size_t& i, uint64_t& v) {
  v = 0;
  for (int shift = 0; shift < 64; shift += 7) {
    if (i >= s.size()) return false;
    const uint8_t b = static_cast<uint8_t>(s[i++]);
    v |= static_cast<uint64_t>(b & 0x7F) << shift;
    if (!(b & 0x80)) return true;
  }
  return false;
}

void write_varint(std::string& out, uint64_t v) {
  while (v >= 0x80) {
    out.push_back(static_cast<char>((v & 0x7F) | 0x80));
    v >>= 7;
  }
  out.push_back(static_cast<char>(v));
}

// Visits the fields of a message: fn(field, wire_type, whole field bytes, payload for
// length-delimited fields). False on malformed input.
template <typename Fn>
bool for_each_field(std::string_view msg, Fn&& fn) {
  size_t i = 0;
  while (i < msg.size()) {
    const size_t start = i;
    uint64_t key = 0, v = 0;
    if (!read_varint(msg, i, key)) return false;
    const uint32_t field = static_cast<uint32_t>(key >> 3), wire = key & 7;
    std::string_view payload;
    switch (wire) {
      case 0:
        if (!read_varint(msg, i, v)) return false;
        break;
      case 1:
        if (msg.size() - i < 8) return false;
        i += 8;
        break;
      case 5:
        if (msg.size() - i < 4) return false;
        i += 4;
        break;
      case 2:
        if (!read_varint(msg, i, v) || v > msg.size() - i) return false;
        payload = msg.substr(i, v);
        i += v;
        break;
      default:
        return false;
    }
    fn(field, wire, msg.substr(start, i - start), payload);
  }
  return true;
}

// The serialized ModelProto with normalizer_spec (field 3).remove_extra_whitespaces (field 4)
// set to false; nullopt when `proto` does not parse. HF's LlamaConverter ignores that flag (its
// normalizer is Prepend("▁") + Replace(" ", "▁")), so clearing it makes libsentencepiece give
// the ids of the converted tokenizer.json, and keeps runs of spaces (code, tables) intact.
std::optional<std::string> keep_whitespace(std::string_view proto) {
  std::string out;
  out.reserve(proto.size() + 8);
  bool inner_ok = true;
  const bool ok = for_each_field(
      proto, [&](uint32_t field, uint32_t wire, std::string_view whole, std::string_view payload) {
        if (field != 3 || wire != 2) {
          out.append(whole);
          return;
        }
        std::string spec;
        inner_ok &= for_each_field(payload,
                                   [&](uint32_t f, uint32_t, std::string_view w, std::string_view) {
                                     if (f != 4) spec.append(w);
                                   });
        spec.push_back(static_cast<char>(4 << 3));  // field 4, varint
        spec.push_back(0);                          // false
        out.push_back(static_cast<char>((3 << 3) | 2));
        write_varint(out, spec.size());
        out += spec;
      });
  if (!ok || !inner_ok) return std::nullopt;
  return out;
}

}  // namespace

SentencePieceTokenizer::SentencePieceTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(
    const std::string& path, const TokenizerConfig& config) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec))
    return not_found(path + ": no such file");  // read_file refuses a FIFO
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  t->path_ = path;
  SPW_ASSIGN_OR_RETURN(std::string proto, read_file(path));
  const std::optional<std::string> patched = keep_whitespace(proto);
  if (!patched) return corrupt(path + ": not a SentencePiece model (malformed protocol buffer)");
  // libsentencepiece reports most damage as a status, but its trie builder (Darts) throws on a
  // piece it cannot index, such as one holding a NUL byte (found by the tokenizer-model fuzz
  // target: std::terminate without a word).
  sentencepiece::util::Status st;
  try {
    st = t->sp_->LoadFromSerializedProto(*patched);
  } catch (const std::exception& e) {
    return corrupt(path + ": not a SentencePiece model: its pieces cannot be indexed (" + e.what() +
                   ")");
  }
  if (!st.ok()) return corrupt(path + ": not a SentencePiece model: " + st.ToString());
  if (t->sp_->GetPieceSize() <= 0) return corrupt(path + ": SentencePiece model has no pieces");

  auto id_of = [&](const std::optional<std::string>& piece,
                   int fallback) -> std::optional<int32_t> {
    if (piece) {
      if (auto id = t->token_to_id(*piece)) return id;
    }
    return fallback >= 0 ? std::optional<int32_t>(fallback) : std::nullopt;
  };
  t->bos_id_ = id_of(config.bos_token, t->sp_->bos_id());
  t->eos_id_ = id_of(config.eos_token, t->sp_->eos_id());
  t->pad_id_ = id_of(config.pad_token, t->sp_->pad_id());
  t->add_bos_ = config.add_bos_token.value_or(true);
  t->add_eos_ = config.add_eos_token.value_or(false);
  t->chat_template_ = config.chat_template;
  t->special_tokens_map_ = spillway::special_tokens_map(config);

  // Whether decode(encode(x)) == x, probed on text that trips the usual lossy settings:
  // whitespace collapsing, NFKC (the ligature and the fraction), and bytes outside the
  // vocabulary (without byte_fallback they become <unk>).
  bool lossless = true;
  for (const char* probe : {"  two  spaces\tand tab\n\nnew lines ", "\xEF\xAC\x81 \xC2\xBD",
                            "\xF0\x9F\xA6\x99 \xE1\x9E\x80\xE1\x9E\xB6 \xE2\x9C\x85"}) {
    const auto ids = t->encode(probe);
    if (!ids.ok()) return ids.status();
    const auto back = t->decode(*ids);
    if (!back.ok()) return back.status();
    lossless &= *back == probe;
  }
  t->lossless_ = lossless;
  return t;
}

Result<std::vector<int32_t>> SentencePieceTokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (!tokenizer_unicode::utf8_valid(text)) {
    repaired = tokenizer_unicode::utf8_repair(text);
    text = repaired;
  }
  std::vector<int> ids;
  if (const auto st = sp_->Encode(text, &ids); !st.ok())
    return invalid_argument(path_ + ": SentencePiece cannot encode a text of " +
                            std::to_string(text.size()) + " bytes: " + st.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

Result<std::vector<int32_t>> SentencePieceTokenizer::encode_with_special(
    std::string_view text) const {
  std::vector<int32_t> ids;
  if (add_bos_ && bos_id_) ids.push_back(*bos_id_);
  SPW_ASSIGN_OR_RETURN(const std::vector<int32_t> body, encode(text));
  ids.insert(ids.end(), body.begin(), body.end());
  if (add_eos_ && eos_id_) ids.push_back(*eos_id_);
  return ids;
}

Result<std::string> SentencePieceTokenizer::decode(std::span<const int32_t> ids,
                                                   bool skip_special) const {
  // SentencePiece drops control tokens when decoding; outside skip_special they are written as
  // their piece text, and a run that follows one keeps its leading space, as HF's decoder does.
  std::string out;
  std::vector<int> run;
  const int n = sp_->GetPieceSize();
  Status failed;
  auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    if (const auto st = sp_->Decode(run, &text); st.ok()) {
      const std::string& first = sp_->IdToPiece(run.front());
      if (!out.empty() && first.rfind("\xE2\x96\x81", 0) == 0 && (text.empty() || text[0] != ' '))
        out.push_back(' ');
      out += text;
    } else if (failed.ok()) {
      failed = invalid_argument(path_ + ": SentencePiece cannot decode " +
                                std::to_string(run.size()) + " ids: " + st.ToString());
    }
    run.clear();
  };
  for (int32_t id : ids) {
    if (id < 0 || id >= n) continue;
    if (sp_->IsControl(id)) {
      if (skip_special) continue;
      flush();
      out += sp_->IdToPiece(id);
      continue;
    }
    run.push_back(id);
  }
  flush();
  if (!failed.ok()) return failed;
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const {
  return sp_->GetPieceSize();
}

std::optional<int32_t> SentencePieceTokenizer::token_to_id(std::string_view token) const {
  const int id = sp_->PieceToId(token);
  // PieceToId answers unk for unknown pieces; only the unk piece itself maps there.
  if (id < 0 || id >= sp_->GetPieceSize() || sp_->IdToPiece(id) != token) return std::nullopt;
  return id;
}

std::string SentencePieceTokenizer::id_to_token(int32_t id) const {
  if (id < 0 || id >= sp_->GetPieceSize()) return {};
  return sp_->IdToPiece(id);
}

}  // namespace spillway

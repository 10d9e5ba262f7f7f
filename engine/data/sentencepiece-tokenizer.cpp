#include "data/sentencepiece-tokenizer.h"

#include <sentencepiece_processor.h>

#include <filesystem>

#include "data/tokenizer-unicode.h"

namespace spillway {

SentencePieceTokenizer::SentencePieceTokenizer()
    : sp_(std::make_unique<sentencepiece::SentencePieceProcessor>()) {}

SentencePieceTokenizer::~SentencePieceTokenizer() = default;

Result<std::unique_ptr<SentencePieceTokenizer>> SentencePieceTokenizer::load(
    const std::string& path, const TokenizerConfig& config) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(path, ec)) return not_found(path + ": no such file");
  std::unique_ptr<SentencePieceTokenizer> t(new SentencePieceTokenizer());
  const auto st = t->sp_->Load(path);
  if (!st.ok()) return corrupt(path + ": not a SentencePiece model: " + st.ToString());
  if (t->sp_->GetPieceSize() <= 0) return corrupt(path + ": SentencePiece model has no pieces");

  auto id_of = [&](const std::optional<std::string>& piece, int fallback) -> std::optional<int32_t> {
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

  // Whether decode(encode(x)) == x, probed on text that trips the usual lossy settings:
  // whitespace collapsing, NFKC (the ligature and the fraction), and bytes outside the
  // vocabulary (without byte_fallback they become <unk>).
  bool lossless = true;
  for (const char* probe : {"  two  spaces\tand tab\n\nnew lines ", "\xEF\xAC\x81 \xC2\xBD",
                            "\xF0\x9F\xA6\x99 \xE1\x9E\x80\xE1\x9E\xB6 \xE2\x9C\x85"}) {
    const std::vector<int32_t> ids = t->encode(probe);
    lossless &= t->decode(ids) == probe;
  }
  t->lossless_ = lossless;
  return t;
}

std::vector<int32_t> SentencePieceTokenizer::encode(std::string_view text) const {
  std::string repaired;
  if (!tokenizer_unicode::utf8_valid(text)) {
    repaired = tokenizer_unicode::utf8_repair(text);
    text = repaired;
  }
  std::vector<int> ids;
  if (!sp_->Encode(text, &ids).ok()) return {};
  return {ids.begin(), ids.end()};
}

std::vector<int32_t> SentencePieceTokenizer::encode_with_special(std::string_view text) const {
  std::vector<int32_t> ids;
  if (add_bos_ && bos_id_) ids.push_back(*bos_id_);
  const auto body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  if (add_eos_ && eos_id_) ids.push_back(*eos_id_);
  return ids;
}

std::string SentencePieceTokenizer::decode(std::span<const int32_t> ids, bool skip_special) const {
  // SentencePiece drops control tokens when decoding; outside skip_special they are written as
  // their piece text, and a run that follows one keeps its leading space, as HF's decoder does.
  std::string out;
  std::vector<int> run;
  const int n = sp_->GetPieceSize();
  auto flush = [&] {
    if (run.empty()) return;
    std::string text;
    if (sp_->Decode(run, &text).ok()) {
      const std::string& first = sp_->IdToPiece(run.front());
      if (!out.empty() && first.rfind("\xE2\x96\x81", 0) == 0 && (text.empty() || text[0] != ' '))
        out.push_back(' ');
      out += text;
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
  return out;
}

int32_t SentencePieceTokenizer::vocab_size() const { return sp_->GetPieceSize(); }

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

#include "data/tokenizer-bpe.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <queue>

#include "core/json-file.h"
#include "data/tokenizer-unicode.h"

namespace spillway {

using nlohmann::json;

namespace {

// Unused ids a vocabulary may leave beyond twice its size before the file counts as damaged.
constexpr uint64_t kMaxVocabGaps = 65536;

}  // namespace

Result<std::unique_ptr<BpeModel>> BpeModel::from_json(const json& model) {
  if (!model.is_object()) return corrupt("\"model\" is not an object");
  const std::string type = model.value("type", std::string("BPE"));
  if (type != "BPE") return unsupported("model type \"" + type + "\" (only BPE is implemented)");
  if (!model.contains("vocab") || !model["vocab"].is_object())
    return corrupt("model: missing \"vocab\" object");
  if (!model.contains("merges") || !model["merges"].is_array())
    return corrupt("model: missing \"merges\" array");

  auto m = std::make_unique<BpeModel>();
  const json& vocab = model["vocab"];
  m->vocab_.reserve(vocab.size() * 2);
  int64_t max_id = -1;
  std::string max_token;
  for (auto it = vocab.begin(); it != vocab.end(); ++it) {
    if (!it.value().is_number_integer())
      return corrupt("model.vocab: id of " + quote_for_message(it.key()) + " is not an integer");
    const int64_t id = it.value().get<int64_t>();
    if (id < 0 || id > INT32_MAX)
      return corrupt("model.vocab: id of " + quote_for_message(it.key()) + " out of range");
    m->vocab_.emplace(it.key(), static_cast<int32_t>(id));
    if (id > max_id) max_id = id, max_token = it.key();
  }
  // The id -> token table is as long as the largest id. Real vocabularies number their tokens from
  // 0 with few gaps; a table mostly of holes (one id of 1e9 among 300 tokens asked for 35 GB) is a
  // damaged file, refused before anything is allocated.
  if (static_cast<uint64_t>(max_id + 1) > 2 * vocab.size() + kMaxVocabGaps) {
    return corrupt("model.vocab: id " + std::to_string(max_id) + " of " +
                   quote_for_message(max_token) + " leaves most ids unused (the vocabulary has " +
                   std::to_string(vocab.size()) +
                   " tokens); ids number the tokens from 0: the file is damaged");
  }
  m->id_to_token_.resize(static_cast<size_t>(max_id + 1));
  for (const auto& [tok, id] : m->vocab_) m->id_to_token_[id] = tok;

  auto str_field = [&](const char* key) {
    return model.contains(key) && model[key].is_string() ? model[key].get<std::string>()
                                                         : std::string();
  };
  m->continuing_subword_prefix_ = str_field("continuing_subword_prefix");
  m->end_of_word_suffix_ = str_field("end_of_word_suffix");
  m->byte_fallback_ = model.value("byte_fallback", false);
  m->fuse_unk_ = model.value("fuse_unk", false);
  m->ignore_merges_ = model.value("ignore_merges", false);
  const std::string unk = str_field("unk_token");
  if (!unk.empty()) {
    auto id = m->token_to_id(unk);
    if (!id) return corrupt("model.unk_token '" + unk + "' is not in the vocabulary");
    m->unk_id_ = *id;
  }
  for (int b = 0; b < 256; ++b) {
    char name[8];
    std::snprintf(name, sizeof(name), "<0x%02X>", b);
    auto id = m->token_to_id(name);
    m->byte_ids_[b] = id ? *id : -1;
  }

  const json& merges = model["merges"];
  m->merges_.reserve(merges.size() * 2);
  const size_t prefix_len = m->continuing_subword_prefix_.size();
  std::string a, b;
  for (size_t i = 0; i < merges.size(); ++i) {
    const json& e = merges[i];
    if (e.is_string()) {
      const std::string& s = e.get_ref<const std::string&>();
      const size_t sp = s.find(' ');
      if (sp == std::string::npos || s.find(' ', sp + 1) != std::string::npos)
        return corrupt("model.merges[" + std::to_string(i) + "] " + quote_for_message(s) +
                       " is not \"a b\"");
      a.assign(s, 0, sp);
      b.assign(s, sp + 1);
    } else if (e.is_array() && e.size() == 2 && e[0].is_string() && e[1].is_string()) {
      a = e[0].get<std::string>();
      b = e[1].get<std::string>();
    } else {
      return corrupt("model.merges[" + std::to_string(i) + "] is neither \"a b\" nor [a, b]");
    }
    auto ia = m->token_to_id(a), ib = m->token_to_id(b);
    if (!ia || !ib)
      return corrupt("model.merges[" + std::to_string(i) + "]: '" + (ia ? b : a) +
                     "' is not in the vocabulary");
    const std::string merged = a + (b.size() >= prefix_len ? b.substr(prefix_len) : b);
    auto inew = m->token_to_id(merged);
    if (!inew)
      return corrupt("model.merges[" + std::to_string(i) + "]: result '" + merged +
                     "' is not in the vocabulary");
    // Later duplicates win, as HF's collect() into a HashMap does.
    m->merges_[pair_key(*ia, *ib)] = Merge{static_cast<int32_t>(i), *inew};
  }
  return m;
}

std::optional<int32_t> BpeModel::token_to_id(std::string_view token) const {
  auto it = vocab_.find(token);
  if (it == vocab_.end()) return std::nullopt;
  return it->second;
}

const std::string* BpeModel::id_to_token(int32_t id) const {
  if (id < 0 || static_cast<size_t>(id) >= id_to_token_.size()) return nullptr;
  return &id_to_token_[id];
}

void BpeModel::initial_symbols(std::string_view w, std::vector<int32_t>& ids) const {
  ids.clear();
  // A pending unk run: HF keeps it open across byte-fallback characters and flushes it only
  // before the next known character or at the end.
  bool unk_pending = false;
  std::string scratch;
  size_t i = 0;
  while (i < w.size()) {
    const size_t start = i;
    i += tokenizer_unicode::utf8_len(static_cast<unsigned char>(w[i]));
    if (i > w.size()) i = w.size();
    std::string_view s = w.substr(start, i - start);
    const bool first = start == 0, last = i == w.size();
    std::optional<int32_t> id;
    if ((first || continuing_subword_prefix_.empty()) && (!last || end_of_word_suffix_.empty())) {
      id = token_to_id(s);
    } else {
      scratch.clear();
      if (!first) scratch += continuing_subword_prefix_;
      scratch += s;
      if (last) scratch += end_of_word_suffix_;
      id = token_to_id(scratch);
    }
    if (id) {
      if (unk_pending) {
        ids.push_back(*unk_id_);
        unk_pending = false;
      }
      ids.push_back(*id);
      continue;
    }
    if (byte_fallback_) {
      bool all = true;
      for (unsigned char c : s) all &= byte_ids_[c] >= 0;
      if (all) {
        for (unsigned char c : s) ids.push_back(byte_ids_[c]);
        continue;
      }
    }
    if (unk_id_) {
      if (unk_pending && !fuse_unk_) ids.push_back(*unk_id_);
      unk_pending = true;
    }
  }
  if (unk_pending) ids.push_back(*unk_id_);
}

void BpeModel::merge_all(std::vector<int32_t>& ids) const {
  const size_t n = ids.size();
  if (n < 2) return;
  struct Sym {
    int32_t id, prev, next;
    bool alive;
  };
  struct Cand {
    int32_t rank, pos, new_id;
    bool operator>(const Cand& o) const { return rank != o.rank ? rank > o.rank : pos > o.pos; }
  };
  std::vector<Sym> sym(n);
  for (size_t k = 0; k < n; ++k)
    sym[k] = {ids[k], static_cast<int32_t>(k) - 1, k + 1 < n ? static_cast<int32_t>(k + 1) : -1,
              true};
  std::vector<Cand> heap;
  heap.reserve(n);
  for (size_t k = 0; k + 1 < n; ++k) {
    auto it = merges_.find(pair_key(ids[k], ids[k + 1]));
    if (it != merges_.end())
      heap.push_back({it->second.rank, static_cast<int32_t>(k), it->second.new_id});
  }
  std::priority_queue<Cand, std::vector<Cand>, std::greater<Cand>> queue(std::greater<Cand>(),
                                                                         std::move(heap));
  while (!queue.empty()) {
    const Cand top = queue.top();
    queue.pop();
    Sym& cur = sym[top.pos];
    if (!cur.alive || cur.next < 0) continue;
    const int32_t right_pos = cur.next;
    Sym& right = sym[right_pos];
    // Stale entry: the pair at this position has changed since it was queued.
    auto it = merges_.find(pair_key(cur.id, right.id));
    if (it == merges_.end() || it->second.new_id != top.new_id) continue;
    cur.id = top.new_id;
    cur.next = right.next;
    right.alive = false;
    if (right.next >= 0) sym[right.next].prev = top.pos;
    if (cur.prev >= 0) {
      auto p = merges_.find(pair_key(sym[cur.prev].id, cur.id));
      if (p != merges_.end()) queue.push({p->second.rank, cur.prev, p->second.new_id});
    }
    if (cur.next >= 0) {
      auto q = merges_.find(pair_key(cur.id, sym[cur.next].id));
      if (q != merges_.end()) queue.push({q->second.rank, top.pos, q->second.new_id});
    }
  }
  ids.clear();
  for (int32_t k = 0; k >= 0; k = sym[k].next) ids.push_back(sym[k].id);
}

void BpeModel::tokenize(std::string_view word, std::vector<int32_t>& out) const {
  if (word.empty()) return;
  if (ignore_merges_) {
    if (auto id = token_to_id(word)) {
      out.push_back(*id);
      return;
    }
  }
  const bool cacheable = word.size() <= kCacheMaxWordBytes;
  CacheShard* shard = nullptr;
  if (cacheable) {
    shard = &cache_[TokenizerStringHash{}(word) % kCacheShards];
    std::lock_guard<std::mutex> lock(shard->mutex);
    auto it = shard->map.find(word);
    if (it != shard->map.end()) {
      out.insert(out.end(), it->second.begin(), it->second.end());
      return;
    }
  }
  std::vector<int32_t> ids;
  initial_symbols(word, ids);
  merge_all(ids);
  out.insert(out.end(), ids.begin(), ids.end());
  if (cacheable) {
    std::lock_guard<std::mutex> lock(shard->mutex);
    if (shard->map.size() >= kCacheShardCapacity) shard->map.clear();
    shard->map.emplace(std::string(word), std::move(ids));
  }
}

}  // namespace spillway

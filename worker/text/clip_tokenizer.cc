#include "worker/text/clip_tokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <zlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <sstream>
#include <unordered_map>

#include "worker/text/byte_level.h"
#include "worker/text/text_clean.h"

namespace adctl {
namespace {

constexpr char kSot[] = "<|startoftext|>";
constexpr char kEot[] = "<|endoftext|>";
constexpr char kEndOfWord[] = "</w>";
// CLIP keeps lines[1 : 49152 - 256 - 2 + 1] of its merges file: 48894 merges.
constexpr int kClipMergeLines = 49152 - 256 - 2;
// Bounds the BPE cache of a long-lived tokenizer (CLIP's grows without bound).
constexpr size_t kMaxCacheEntries = 200000;

const pcre2_code* SplitPattern() {
  // Compiled once; a compiled pattern is read-only and may be shared by threads (pcre2api(3)).
  static const pcre2_code* const code = [] {
    const char* pattern =
        R"(<\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+)";
    int error = 0;
    PCRE2_SIZE offset = 0;
    return pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pattern), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_CASELESS, &error, &offset, nullptr);
  }();
  return code;
}

std::vector<std::string> SplitLines(const std::string& text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (true) {
    size_t nl = text.find('\n', start);
    if (nl == std::string::npos) {
      lines.push_back(text.substr(start));
      return lines;
    }
    lines.push_back(text.substr(start, nl - start));
    start = nl + 1;
  }
}

// Python's str.split() into exactly two parts, or false.
bool SplitMerge(std::string line, std::pair<std::string, std::string>* merge) {
  if (!line.empty() && line.back() == '\r') line.pop_back();
  std::istringstream in(line);
  std::string a, b, extra;
  if (!(in >> a >> b) || (in >> extra)) return false;
  *merge = {a, b};
  return true;
}

Result<std::string> ReadGzip(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return NotFound(path + ": cannot open CLIP BPE file (missing or unreadable)");
  unsigned char magic[2] = {0, 0};
  size_t got = std::fread(magic, 1, 2, f);
  std::fclose(f);
  if (got != 2 || magic[0] != 0x1F || magic[1] != 0x8B) {
    return InvalidArgument(path + ": not a gzip file (CLIP's bpe_simple_vocab_16e6.txt.gz)");
  }
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) return NotFound(path + ": cannot open");
  std::string out;
  char buffer[1 << 16];
  while (true) {
    int n = gzread(gz, buffer, sizeof(buffer));
    if (n < 0) {
      int code = 0;
      std::string message = gzerror(gz, &code);
      gzclose(gz);
      return DataLoss(path + ": corrupt gzip data: " + message);
    }
    if (n == 0) break;
    out.append(buffer, n);
  }
  // gzread stops quietly at a truncated stream; gzclose_r reports it.
  int rc = gzclose(gz);
  if (rc != Z_OK && rc != Z_BUF_ERROR) return DataLoss(path + ": corrupt gzip data");
  if (rc == Z_BUF_ERROR) return DataLoss(path + ": truncated gzip data");
  return out;
}

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFound(path + ": missing or unreadable");
  std::ostringstream data;
  data << in.rdbuf();
  return data.str();
}

Result<ClipTokenizer> LoadClipGzip(const std::string& path) {
  Result<std::string> text = ReadGzip(path);
  if (!text.ok()) return text.status();
  std::vector<std::string> lines = SplitLines(*text);
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = 1; i < lines.size() && i <= static_cast<size_t>(kClipMergeLines); ++i) {
    std::pair<std::string, std::string> merge;
    if (!SplitMerge(lines[i], &merge)) {
      // The file's last line is empty; anything else that is not "a b" is corrupt.
      if (lines[i].empty() && i + 1 == lines.size()) break;
      return InvalidArgument(path + ": malformed merges line " + std::to_string(i + 1) +
                             " (want two space-separated symbols): '" + lines[i] + "'");
    }
    merges.push_back(std::move(merge));
  }
  std::vector<std::string> vocab = ClipBaseVocabulary();
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  vocab.push_back(kSot);
  vocab.push_back(kEot);
  return ClipTokenizer::FromVocabAndMerges(std::move(vocab), std::move(merges), path);
}

Result<ClipTokenizer> LoadHfFolder(const std::string& dir) {
  std::string vocab_path = dir + "/vocab.json";
  std::string merges_path = dir + "/merges.txt";
  Result<std::string> vocab_text = ReadFile(vocab_path);
  if (!vocab_text.ok()) return vocab_text.status();
  Result<std::string> merges_text = ReadFile(merges_path);
  if (!merges_text.ok()) return merges_text.status();

  nlohmann::json vocab_json =
      nlohmann::json::parse(*vocab_text, nullptr, /*allow_exceptions=*/false);
  if (vocab_json.is_discarded() || !vocab_json.is_object()) {
    return InvalidArgument(vocab_path + ": not a JSON object of token -> id");
  }
  std::vector<std::string> id_to_token(vocab_json.size());
  std::vector<bool> seen(vocab_json.size(), false);
  for (const auto& [token, id] : vocab_json.items()) {
    if (!id.is_number_integer()) {
      return InvalidArgument(vocab_path + ": id of '" + token + "' is not an integer");
    }
    int64_t value = id.get<int64_t>();
    if (value < 0 || value >= static_cast<int64_t>(id_to_token.size()) || seen[value]) {
      return InvalidArgument(vocab_path + ": id " + std::to_string(value) + " of '" + token +
                             "' is out of range or repeated (ids must be 0.." +
                             std::to_string(id_to_token.size() - 1) + ", each once)");
    }
    seen[value] = true;
    id_to_token[value] = token;
  }

  std::vector<std::string> lines = SplitLines(*merges_text);
  std::vector<std::pair<std::string, std::string>> merges;
  for (size_t i = 0; i < lines.size(); ++i) {
    if (i == 0 && lines[i].rfind("#", 0) == 0) continue;  // "#version: 0.2"
    // transformers' CLIPTokenizer keeps lines[1 : 49152 - 256 - 2 + 1] too.
    if (merges.size() == static_cast<size_t>(kClipMergeLines)) break;
    std::pair<std::string, std::string> merge;
    if (!SplitMerge(lines[i], &merge)) {
      if (lines[i].empty() && i + 1 == lines.size()) break;
      return InvalidArgument(merges_path + ": malformed merges line " + std::to_string(i + 1) +
                             " (want two space-separated symbols): '" + lines[i] + "'");
    }
    merges.push_back(std::move(merge));
  }
  return ClipTokenizer::FromVocabAndMerges(std::move(id_to_token), std::move(merges), dir);
}

}  // namespace

struct ClipTokenizer::Impl {
  // Constant after construction.
  std::unordered_map<std::string, int> token_to_id;
  std::unordered_map<std::string, int> merge_rank;  // "a b" -> rank
  std::vector<std::string> byte_to_unicode;

  mutable std::mutex mu;
  mutable std::unordered_map<std::string, std::vector<int>> cache;  // guarded by mu
};

ClipTokenizer::ClipTokenizer(ClipTokenizer&&) noexcept = default;
ClipTokenizer& ClipTokenizer::operator=(ClipTokenizer&&) noexcept = default;
ClipTokenizer::~ClipTokenizer() = default;

Result<ClipTokenizer> ClipTokenizer::Load(const std::string& path) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    return NotFound(path +
                    ": CLIP tokenizer not found (want bpe_simple_vocab_16e6.txt.gz or a "
                    "folder with vocab.json and merges.txt)");
  }
  if (std::filesystem::is_directory(path, ec)) return LoadHfFolder(path);
  return LoadClipGzip(path);
}

Result<ClipTokenizer> ClipTokenizer::FromVocabAndMerges(
    std::vector<std::string> id_to_token, std::vector<std::pair<std::string, std::string>> merges,
    const std::string& source) {
  if (SplitPattern() == nullptr) return Internal("CLIP split regex failed to compile");
  ClipTokenizer tok;
  tok.impl_ = std::make_unique<Impl>();
  Impl& impl = *tok.impl_;
  impl.byte_to_unicode = BytesToUnicode();
  for (size_t id = 0; id < id_to_token.size(); ++id) {
    impl.token_to_id[id_to_token[id]] = static_cast<int>(id);  // a repeat: the last id wins
  }
  auto require = [&](const std::string& token, const std::string& why) -> Status {
    if (impl.token_to_id.count(token) == 0) {
      return InvalidArgument(source + ": token '" + token + "' missing from the vocabulary (" +
                             why + ")");
    }
    return Status::Ok();
  };
  for (const std::string& c : impl.byte_to_unicode) {
    ADCTL_RETURN_IF_ERROR(require(c, "byte character"));
    ADCTL_RETURN_IF_ERROR(require(c + kEndOfWord, "end-of-word byte character"));
  }
  for (size_t rank = 0; rank < merges.size(); ++rank) {
    const auto& [a, b] = merges[rank];
    ADCTL_RETURN_IF_ERROR(
        require(a + b, "result of merge " + std::to_string(rank + 1) + " '" + a + " " + b + "'"));
    impl.merge_rank[a + " " + b] = static_cast<int>(rank);  // a repeat: the last rank wins
  }
  ADCTL_RETURN_IF_ERROR(require(kSot, "start of text"));
  ADCTL_RETURN_IF_ERROR(require(kEot, "end of text"));
  tok.sot_id_ = impl.token_to_id[kSot];
  tok.eot_id_ = impl.token_to_id[kEot];
  tok.id_to_token_ = std::move(id_to_token);
  tok.merges_ = std::move(merges);
  return tok;
}

std::vector<int> ClipTokenizer::Bpe(const std::string& piece) const {
  const Impl& impl = *impl_;
  if (piece == kSot) return {sot_id_};
  if (piece == kEot) return {eot_id_};
  {
    std::lock_guard<std::mutex> lock(impl.mu);
    auto it = impl.cache.find(piece);
    if (it != impl.cache.end()) return it->second;
  }
  // Split into UTF-8 characters; the last one carries </w>.
  std::vector<std::string> word;
  for (size_t i = 0; i < piece.size();) {
    size_t len = 1;
    unsigned char c = static_cast<unsigned char>(piece[i]);
    if (c >= 0xF0) {
      len = 4;
    } else if (c >= 0xE0) {
      len = 3;
    } else if (c >= 0xC0) {
      len = 2;
    }
    word.push_back(piece.substr(i, len));
    i += len;
  }
  if (word.empty()) return {};
  word.back() += kEndOfWord;

  // simple_tokenizer.py's loop: merge the lowest-ranked adjacent pair everywhere, left to right.
  std::string key;
  while (word.size() > 1) {
    int best_rank = -1;
    size_t best = 0;
    for (size_t i = 0; i + 1 < word.size(); ++i) {
      key.assign(word[i]).append(" ").append(word[i + 1]);
      auto it = impl.merge_rank.find(key);
      if (it != impl.merge_rank.end() && (best_rank < 0 || it->second < best_rank)) {
        best_rank = it->second;
        best = i;
      }
    }
    if (best_rank < 0) break;
    const std::string first = word[best], second = word[best + 1];
    std::vector<std::string> merged;
    merged.reserve(word.size());
    for (size_t i = 0; i < word.size();) {
      if (i + 1 < word.size() && word[i] == first && word[i + 1] == second) {
        merged.push_back(first + second);
        i += 2;
      } else {
        merged.push_back(word[i]);
        i += 1;
      }
    }
    word = std::move(merged);
  }
  std::vector<int> ids;
  ids.reserve(word.size());
  // Every symbol is in the vocabulary: FromVocabAndMerges checked bytes and merge results.
  for (const std::string& symbol : word) ids.push_back(impl.token_to_id.at(symbol));

  std::lock_guard<std::mutex> lock(impl.mu);
  if (impl.cache.size() >= kMaxCacheEntries) impl.cache.clear();
  impl.cache.emplace(piece, ids);
  return ids;
}

std::vector<int> ClipTokenizer::Encode(const std::string& text) const {
  std::string cleaned = CleanClipText(text);
  std::vector<int> ids;
  const pcre2_code* pattern = SplitPattern();
  std::unique_ptr<pcre2_match_data, void (*)(pcre2_match_data*)> match(
      pcre2_match_data_create_from_pattern(pattern, nullptr), pcre2_match_data_free);
  PCRE2_SIZE offset = 0;
  std::string piece;
  while (offset < cleaned.size()) {
    int rc = pcre2_match(pattern, reinterpret_cast<PCRE2_SPTR>(cleaned.data()), cleaned.size(),
                         offset, 0, match.get(), nullptr);
    if (rc < 0) break;  // PCRE2_ERROR_NOMATCH: only whitespace is left
    PCRE2_SIZE* span = pcre2_get_ovector_pointer(match.get());
    piece.clear();
    for (PCRE2_SIZE i = span[0]; i < span[1]; ++i) {
      piece += impl_->byte_to_unicode[static_cast<unsigned char>(cleaned[i])];
    }
    std::vector<int> piece_ids = Bpe(piece);
    ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
    // The pattern never matches the empty string, so this always advances.
    offset = span[1] > span[0] ? span[1] : span[0] + 1;
  }
  return ids;
}

std::vector<int> ClipTokenizer::EncodePadded(const std::string& text, int length) const {
  if (length < 2) length = 2;
  std::vector<int> ids = Encode(text);
  if (ids.size() > static_cast<size_t>(length - 2)) ids.resize(length - 2);
  std::vector<int> out;
  out.reserve(length);
  out.push_back(sot_id_);
  out.insert(out.end(), ids.begin(), ids.end());
  out.resize(length, eot_id_);  // the eot, then eot padding
  return out;
}

Status WriteHfTokenizer(const ClipTokenizer& tokenizer, const std::string& dir) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) return Internal(dir + ": cannot create tokenizer folder: " + ec.message());

  auto write = [&](const std::string& name, const std::string& content) -> Status {
    std::string path = dir + "/" + name;
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << content;
    out.close();
    if (!out) return Internal(path + ": write failed");
    return Status::Ok();
  };

  nlohmann::json vocab = nlohmann::json::object();  // std::map: keys sorted like sort_keys=True
  for (size_t id = 0; id < tokenizer.id_to_token().size(); ++id) {
    vocab[tokenizer.id_to_token()[id]] = id;
  }
  ADCTL_RETURN_IF_ERROR(write("vocab.json", vocab.dump(2) + "\n"));

  std::string merges = "#version: 0.2\n";
  for (const auto& [a, b] : tokenizer.merges()) merges += a + " " + b + "\n";
  ADCTL_RETURN_IF_ERROR(write("merges.txt", merges));

  auto added_token = [](const std::string& content) {
    return nlohmann::json{{"content", content},
                          {"lstrip", false},
                          {"normalized", true},
                          {"rstrip", false},
                          {"single_word", false}};
  };
  nlohmann::json decoder = nlohmann::json::object();
  for (auto [id, content] : {std::pair<int, std::string>{tokenizer.sot_id(), kSot},
                             std::pair<int, std::string>{tokenizer.eot_id(), kEot}}) {
    nlohmann::json entry = added_token(content);
    entry["special"] = true;
    decoder[std::to_string(id)] = entry;
  }
  nlohmann::json config = {
      {"add_prefix_space", false}, {"added_tokens_decoder", decoder},
      {"bos_token", kSot},         {"clean_up_tokenization_spaces", true},
      {"do_lower_case", true},     {"eos_token", kEot},
      {"errors", "replace"},       {"model_max_length", ClipTokenizer::kMaxLength},
      {"pad_token", kEot},         {"tokenizer_class", "CLIPTokenizer"},
      {"unk_token", kEot},
  };
  ADCTL_RETURN_IF_ERROR(write("tokenizer_config.json", config.dump(2) + "\n"));

  nlohmann::json special = {
      {"bos_token", added_token(kSot)},
      {"eos_token", added_token(kEot)},
      {"pad_token", kEot},
      {"unk_token", added_token(kEot)},
  };
  return write("special_tokens_map.json", special.dump(2) + "\n");
}

}  // namespace adctl

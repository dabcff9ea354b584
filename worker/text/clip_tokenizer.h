// CLIP's byte-level BPE tokenizer (openai/CLIP `clip/simple_tokenizer.py`, the same ids as
// Hugging Face's `CLIPTokenizer`), for the captions of a video dataset.
//
// Encoding: CleanClipText (text_clean.h: html-unescape, whitespace collapse, lower-case; ftfy is
// only partly replicated), then CLIP's split regex
//   <\|startoftext\|>|<\|endoftext\|>|'s|'t|'re|'ve|'m|'ll|'d|[\p{L}]+|[\p{N}]|[^\s\p{L}\p{N}]+
// (case-insensitive, PCRE2 with UTF + UCP), each piece's UTF-8 bytes mapped through
// `bytes_to_unicode`, then BPE by merge rank with `</w>` marking the end of a word. A piece that
// is exactly `<|startoftext|>` or `<|endoftext|>` becomes that special token, as in CLIP.
//
// Two on-disk forms load:
//  * CLIP's `bpe_simple_vocab_16e6.txt.gz` (one merge per line after a header line): the
//    vocabulary is the 256 byte characters, their `</w>` forms, the merges of lines
//    1..48894 (`lines[1:49152-256-2+1]`), then `<|startoftext|>` and `<|endoftext|>`;
//  * a Hugging Face tokenizer folder: `vocab.json` (token -> id) and `merges.txt` (a `#version`
//    line, then one merge per line in rank order, at most 48894 like transformers'
//    CLIPTokenizer); the special tokens are looked up in the vocab.
// Loading checks that every byte character, its `</w>` form, every merge result and both special
// tokens are in the vocabulary, so encoding never meets an unknown token.
//
// Thread-safety: Encode and EncodePadded are const and may run on several threads at once (the
// BPE word cache is behind a mutex).
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "common/status.h"

namespace adctl {

class ClipTokenizer {
 public:
  static constexpr int kMaxLength = 77;  // CLIP's context length (model_max_length)

  // `path` is CLIP's .gz merges file or a Hugging Face tokenizer folder.
  static Result<ClipTokenizer> Load(const std::string& path);
  // From an explicit vocabulary (id -> token) and merges in rank order; checked like Load.
  // `source` names the origin in error messages.
  static Result<ClipTokenizer> FromVocabAndMerges(
      std::vector<std::string> id_to_token, std::vector<std::pair<std::string, std::string>> merges,
      const std::string& source);

  ClipTokenizer(ClipTokenizer&&) noexcept;
  ClipTokenizer& operator=(ClipTokenizer&&) noexcept;
  ~ClipTokenizer();

  // Token ids of `text`, without start/end tokens.
  std::vector<int> Encode(const std::string& text) const;
  // Stable Diffusion's text-encoder input: sot, Encode(text) truncated to length - 2, eot, then
  // eot up to `length` (the pad token of SD's tokenizer is `<|endoftext|>`). length >= 2.
  std::vector<int> EncodePadded(const std::string& text, int length = kMaxLength) const;

  int sot_id() const { return sot_id_; }
  int eot_id() const { return eot_id_; }
  int vocab_size() const { return static_cast<int>(id_to_token_.size()); }
  // id -> token string (byte-level characters, `</w>` suffixes), as in vocab.json.
  const std::vector<std::string>& id_to_token() const { return id_to_token_; }
  // Merges in rank order.
  const std::vector<std::pair<std::string, std::string>>& merges() const { return merges_; }

 private:
  struct Impl;
  ClipTokenizer() = default;
  // BPE of one byte-encoded piece, as token ids.
  std::vector<int> Bpe(const std::string& piece) const;

  // Constant after construction.
  std::vector<std::string> id_to_token_;
  std::vector<std::pair<std::string, std::string>> merges_;
  int sot_id_ = -1;
  int eot_id_ = -1;
  std::unique_ptr<Impl> impl_;  // token -> id, merge ranks, byte table, regex, cache + its mutex
};

// Writes the Hugging Face folder form of `tokenizer` to `dir` (created if missing): vocab.json
// (sorted keys, UTF-8), merges.txt (`#version: 0.2` header), tokenizer_config.json and
// special_tokens_map.json as transformers' CLIPTokenizer.save_pretrained writes them (bos
// `<|startoftext|>`, eos/pad/unk `<|endoftext|>`, model_max_length 77).
Status WriteHfTokenizer(const ClipTokenizer& tokenizer, const std::string& dir);

// A small valid CLIP-style vocabulary of exactly `vocab_size` tokens (at least 514): the 256
// byte characters, their 256 `</w>` forms, vocab_size - 514 merges learnt deterministically by
// BPE from a built-in list of common English caption words, then sot = vocab_size - 2 and
// eot = vocab_size - 1. It tokenises any text (unknown words fall back to bytes). For the tiny
// test model, whose text encoder has vocab 1000 and eos id 999.
Result<ClipTokenizer> MakeTinyClipTokenizer(int vocab_size);

}  // namespace adctl

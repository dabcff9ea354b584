// MakeTinyClipTokenizer (declared in clip_tokenizer.h): a small CLIP-style BPE vocabulary learnt
// from a built-in word list, for the tiny test model.
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "worker/text/byte_level.h"
#include "worker/text/clip_tokenizer.h"

namespace adctl {
namespace {

// Common words of short video captions (WebVid-like), most frequent first; also the words the
// synthetic video maker uses (colours, shapes, directions).
constexpr const char* kCaptionWords[] = {
    "a",          "the",       "of",       "and",       "in",         "on",        "with",
    "is",         "at",        "to",       "moving",    "background", "red",       "blue",
    "green",      "yellow",    "white",    "black",     "orange",     "purple",    "pink",
    "gray",       "brown",     "cyan",     "circle",    "square",     "triangle",  "left",
    "right",      "up",        "down",     "growing",   "shrinking",  "gradient",  "plain",
    "man",        "woman",     "people",   "person",    "young",      "old",       "girl",
    "boy",        "child",     "children", "family",    "dog",        "cat",       "bird",
    "horse",      "fish",      "water",    "sea",       "ocean",      "beach",     "river",
    "lake",       "sky",       "clouds",   "sun",       "sunset",     "sunrise",   "night",
    "day",        "light",     "dark",     "city",      "street",     "road",      "car",
    "cars",       "traffic",   "building", "buildings", "house",      "home",      "room",
    "office",     "kitchen",   "table",    "food",      "hands",      "hand",      "face",
    "eyes",       "hair",      "smiling",  "looking",   "walking",    "running",   "sitting",
    "standing",   "talking",   "working",  "playing",   "dancing",    "flying",    "swimming",
    "driving",    "eating",    "drinking", "holding",   "using",      "camera",    "view",
    "aerial",     "close",     "shot",     "slow",      "motion",     "timelapse", "footage",
    "video",      "landscape", "nature",   "forest",    "trees",      "tree",      "flowers",
    "flower",     "grass",     "field",    "mountain",  "mountains",  "snow",      "winter",
    "summer",     "spring",    "autumn",   "rain",      "wind",       "fire",      "smoke",
    "waves",      "sand",      "rock",     "stone",     "wood",       "glass",     "metal",
    "abstract",   "animation", "loop",     "colorful",  "bright",     "beautiful", "small",
    "large",      "big",       "little",   "long",      "short",      "fast",      "over",
    "under",      "through",   "from",     "into",      "near",       "around",    "across",
    "top",        "bottom",    "center",   "side",      "front",      "back",      "shape",
    "shapes",     "ball",      "box",      "line",      "lines",      "dots",      "pattern",
    "texture",    "color",     "colors",   "business",  "computer",   "phone",     "screen",
    "technology", "digital",   "concept",  "group",     "friends",    "couple",    "together",
    "happy",      "portrait",  "mother",   "father",    "baby",       "sport",     "game",
    "ship",       "boat",      "train",    "plane",     "bike",       "park",      "garden",
    "window",     "door",      "wall",     "floor",     "paper",      "book",      "music",
    "guitar",     "piano",     "art",      "painting",  "drawing",    "studio",    "stage",
    "crowd",      "market",    "town",     "village",   "country",    "world",     "earth",
    "space",      "star",      "stars",    "moon",      "planet",     "time",      "one",
    "two",        "three",     "first",    "new",       "it",         "his",       "her",
    "their",      "an",        "by",       "for",       "as",         "are",       "this",
    "that",       "while",     "then",     "slowly",    "quickly",    "cinematic", "beautiful",
};

using Word = std::vector<std::string>;

}  // namespace

Result<ClipTokenizer> MakeTinyClipTokenizer(int vocab_size) {
  constexpr int kBase = 512;  // 256 byte characters + their </w> forms
  if (vocab_size < kBase + 2) {
    return InvalidArgument("tiny CLIP vocabulary: vocab_size " + std::to_string(vocab_size) +
                           " is below 514 (256 bytes, 256 end-of-word bytes, sot, eot)");
  }
  const std::vector<std::string> base = ClipBaseVocabulary();

  // Word frequencies: earlier words of the list count more.
  constexpr int kNumWords = sizeof(kCaptionWords) / sizeof(kCaptionWords[0]);
  std::vector<std::pair<Word, int>> words;
  std::set<std::string> distinct;
  for (int i = 0; i < kNumWords; ++i) {
    std::string w = kCaptionWords[i];
    if (!distinct.insert(w).second) continue;
    Word symbols;
    for (char c : w) symbols.push_back(std::string(1, c));  // ASCII: byte char == itself
    symbols.back() += "</w>";
    words.push_back({symbols, kNumWords - i});
  }

  // Plain BPE learning: merge the most frequent adjacent pair (ties: the smallest pair), skipping
  // pairs whose result is already a token, so every merge adds exactly one new token.
  std::set<std::string> tokens(base.begin(), base.end());
  std::vector<std::pair<std::string, std::string>> merges;
  const int wanted = vocab_size - kBase - 2;
  while (static_cast<int>(merges.size()) < wanted) {
    std::map<std::pair<std::string, std::string>, int> counts;
    for (const auto& [symbols, freq] : words) {
      for (size_t i = 0; i + 1 < symbols.size(); ++i) counts[{symbols[i], symbols[i + 1]}] += freq;
    }
    const std::pair<std::string, std::string>* best = nullptr;
    int best_count = 0;
    for (const auto& [pair, count] : counts) {
      if (count > best_count && tokens.count(pair.first + pair.second) == 0) {
        best = &pair;
        best_count = count;
      }
    }
    if (best == nullptr) {
      return InvalidArgument("tiny CLIP vocabulary: vocab_size " + std::to_string(vocab_size) +
                             " is too large; the built-in word list gives at most " +
                             std::to_string(kBase + 2 + merges.size()) + " tokens");
    }
    std::pair<std::string, std::string> merge = *best;
    for (auto& [symbols, freq] : words) {
      Word merged;
      for (size_t i = 0; i < symbols.size();) {
        if (i + 1 < symbols.size() && symbols[i] == merge.first && symbols[i + 1] == merge.second) {
          merged.push_back(merge.first + merge.second);
          i += 2;
        } else {
          merged.push_back(symbols[i++]);
        }
      }
      symbols = std::move(merged);
    }
    tokens.insert(merge.first + merge.second);
    merges.push_back(std::move(merge));
  }

  std::vector<std::string> vocab = base;
  for (const auto& [a, b] : merges) vocab.push_back(a + b);
  vocab.push_back("<|startoftext|>");
  vocab.push_back("<|endoftext|>");
  return ClipTokenizer::FromVocabAndMerges(std::move(vocab), std::move(merges),
                                           "tiny CLIP vocabulary");
}

}  // namespace adctl

#include "worker/text/clip_tokenizer.h"

#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <thread>

#include "tests/testing/temp_dir.h"
#include "worker/text/text_clean.h"
#include "worker/text/tokenize_command.h"

namespace adctl {
namespace {

const std::string kFixtures = ADCTL_FIXTURES_DIR;
const std::string kClipGz = kFixtures + "/clip_bpe_simple_vocab_16e6.txt.gz";

nlohmann::json Cases() {
  std::ifstream in(kFixtures + "/clip_tokenizer_cases.json");
  EXPECT_TRUE(in.good());
  return nlohmann::json::parse(in);
}

void ExpectAllCases(const ClipTokenizer& tokenizer) {
  nlohmann::json cases = Cases();
  EXPECT_EQ(tokenizer.sot_id(), cases["sot"].get<int>());
  EXPECT_EQ(tokenizer.eot_id(), cases["eot"].get<int>());
  EXPECT_EQ(tokenizer.vocab_size(), cases["vocab_size"].get<int>());
  ASSERT_GE(cases["cases"].size(), 10u);
  for (const auto& c : cases["cases"]) {
    std::string text = c["text"].get<std::string>();
    EXPECT_EQ(tokenizer.Encode(text), c["ids"].get<std::vector<int>>()) << "text: " << text;
  }
}

void WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

TEST(ClipTokenizerTest, ClipGzipMatchesReferenceCases) {
  Result<ClipTokenizer> tokenizer = ClipTokenizer::Load(kClipGz);
  ASSERT_TRUE(tokenizer.ok()) << tokenizer.status().ToString();
  ExpectAllCases(*tokenizer);
}

TEST(ClipTokenizerTest, HfFolderWrittenFromGzipMatchesReferenceCases) {
  Result<ClipTokenizer> gz = ClipTokenizer::Load(kClipGz);
  ASSERT_TRUE(gz.ok()) << gz.status().ToString();
  TempDir dir;
  std::string folder = dir.file("tokenizer");
  ASSERT_TRUE(WriteHfTokenizer(*gz, folder).ok());

  std::ifstream merges(folder + "/merges.txt");
  std::string first;
  std::getline(merges, first);
  EXPECT_EQ(first, "#version: 0.2");
  std::ifstream config_in(folder + "/tokenizer_config.json");
  nlohmann::json config = nlohmann::json::parse(config_in);
  EXPECT_EQ(config["bos_token"], "<|startoftext|>");
  EXPECT_EQ(config["eos_token"], "<|endoftext|>");
  EXPECT_EQ(config["pad_token"], "<|endoftext|>");
  EXPECT_EQ(config["unk_token"], "<|endoftext|>");
  EXPECT_EQ(config["model_max_length"], 77);
  EXPECT_EQ(config["tokenizer_class"], "CLIPTokenizer");
  std::ifstream special_in(folder + "/special_tokens_map.json");
  nlohmann::json special = nlohmann::json::parse(special_in);
  EXPECT_EQ(special["bos_token"]["content"], "<|startoftext|>");
  EXPECT_EQ(special["eos_token"]["content"], "<|endoftext|>");
  std::ifstream vocab_in(folder + "/vocab.json");
  nlohmann::json vocab = nlohmann::json::parse(vocab_in);
  EXPECT_EQ(vocab["<|endoftext|>"], 49407);
  EXPECT_EQ(vocab["!"], 0);
  EXPECT_EQ(vocab["a</w>"], 320);

  Result<ClipTokenizer> hf = ClipTokenizer::Load(folder);
  ASSERT_TRUE(hf.ok()) << hf.status().ToString();
  ExpectAllCases(*hf);
  EXPECT_EQ(hf->merges(), gz->merges());
}

TEST(ClipTokenizerTest, EncodePaddedAddsSotEotAndPadsWithEot) {
  Result<ClipTokenizer> tokenizer = ClipTokenizer::Load(kClipGz);
  ASSERT_TRUE(tokenizer.ok());
  std::vector<int> padded = tokenizer->EncodePadded("a dog running on the beach");
  ASSERT_EQ(padded.size(), 77u);
  std::vector<int> head(padded.begin(), padded.begin() + 8);
  EXPECT_EQ(head, (std::vector<int>{49406, 320, 1929, 2761, 525, 518, 2117, 49407}));
  for (size_t i = 8; i < padded.size(); ++i) EXPECT_EQ(padded[i], 49407) << i;

  EXPECT_EQ(tokenizer->EncodePadded(""), [] {
    std::vector<int> v(77, 49407);
    v[0] = 49406;
    return v;
  }());
  EXPECT_EQ(tokenizer->EncodePadded("a dog", 4), (std::vector<int>{49406, 320, 1929, 49407}));
}

TEST(ClipTokenizerTest, EncodePaddedTruncatesToSot75Eot) {
  Result<ClipTokenizer> tokenizer = ClipTokenizer::Load(kClipGz);
  ASSERT_TRUE(tokenizer.ok());
  std::string long_text;
  for (int i = 0; i < 100; ++i) long_text += "word ";
  std::vector<int> padded = tokenizer->EncodePadded(long_text);
  ASSERT_EQ(padded.size(), 77u);
  EXPECT_EQ(padded.front(), 49406);
  for (int i = 1; i <= 75; ++i) EXPECT_EQ(padded[i], 2653) << i;
  EXPECT_EQ(padded.back(), 49407);
}

TEST(ClipTokenizerTest, SpecialTokensInTextAndCleaning) {
  Result<ClipTokenizer> tokenizer = ClipTokenizer::Load(kClipGz);
  ASSERT_TRUE(tokenizer.ok());
  EXPECT_EQ(tokenizer->Encode("<|endoftext|>"), std::vector<int>{49407});
  EXPECT_EQ(tokenizer->Encode("a<|startoftext|>"), (std::vector<int>{320, 49406}));
  // Double html.unescape, like CLIP: "&amp;amp;" -> "&amp;" -> "&".
  EXPECT_EQ(tokenizer->Encode("salt &amp;amp; pepper"), tokenizer->Encode("salt & pepper"));
  EXPECT_EQ(tokenizer->Encode("DOG\n\n  CAT"), tokenizer->Encode("dog cat"));
}

TEST(TextCleanTest, HtmlUnescapeFollowsPython) {
  EXPECT_EQ(HtmlUnescape("a &amp; b"), "a & b");
  EXPECT_EQ(HtmlUnescape("&lt;p&gt; &quot;x&quot; &#39;y&#x27;"), "<p> \"x\" 'y'");
  EXPECT_EQ(HtmlUnescape("caf&eacute; &copy &ampx"), "café © &x");  // legacy names need no ';'
  EXPECT_EQ(HtmlUnescape("&#128; &#0; &#x110000;"), "€ \xEF\xBF\xBD \xEF\xBF\xBD");
  EXPECT_EQ(HtmlUnescape("&unknownentity; & &#; &#x;"), "&unknownentity; & &#; &#x;");
  EXPECT_EQ(HtmlUnescape("&hellip;&mdash;"), "…—");
  EXPECT_EQ(CleanClipText("  Caf\xC3\xA9  ‘Quoted’ \t STRASSE &amp;amp; "),
            "café 'quoted' strasse &");
}

// ftfy.fix_text's outputs for these inputs (ftfy 6, its documented examples among them).
TEST(TextCleanTest, FixTextRepairsMojibakeLikeFtfy) {
  EXPECT_EQ(FixText("cafÃ©"), "café");
  EXPECT_EQ(FixText("Ã¼ber"), "über");
  // Curly quotes in UTF-8 read as Windows-1252 (0x9D is undefined there: a C1 control).
  EXPECT_EQ(FixText("â€œmojibakeâ€\xC2\x9D"), "\"mojibake\"");
  // Twice over: UTF-8 → Windows-1252 → UTF-8 → Windows-1252.
  EXPECT_EQ(FixText("The Mona Lisa doesnÃƒÂ¢Ã¢â€šÂ¬Ã¢â€žÂ¢t have eyebrows."),
            "The Mona Lisa doesn't have eyebrows.");
  EXPECT_EQ(FixText("a dog running on the beachâ€¦"), "a dog running on the beach…");
  // Text that only looks foreign stays: a lone Latin-1 letter is not a UTF-8 sequence.
  EXPECT_EQ(FixText("naïve café Ã"), "naïve café Ã");
  EXPECT_EQ(FixText("東京 at night 🌃"), "東京 at night 🌃");
  // The other default fixes.
  EXPECT_EQ(FixText("\xEF\xAC\x81sh"), "fish");                    // ligature ﬁ
  EXPECT_EQ(FixText("ＬＯＵＤ　ｎｏｉｓｅ"), "LOUD noise");        // full width
  EXPECT_EQ(FixText("\x1B[36;44mblue\x1B[0m text"), "blue text");  // terminal escapes
  EXPECT_EQ(FixText("zero\xE2\x80\x8B\xEF\xBB\xBFwidth\x07"), "zero\xE2\x80\x8Bwidth");  // BOM, BEL
  EXPECT_EQ(FixText("price \xC2\x80 5"), "price € 5");               // C1 control as Windows-1252
  EXPECT_EQ(FixText("cafe\xCC\x81"), "café");                        // NFC
  EXPECT_EQ(FixText("&lt;b&gt; &amp; <i>"), "&lt;b&gt; &amp; <i>");  // HTML: left for CLIP
  EXPECT_EQ(FixText("fish &amp; chips"), "fish & chips");
  EXPECT_EQ(CleanClipText("A CafÃ© IN  Paris"), "a café in paris");
}

TEST(ClipTokenizerTest, TinyVocabularyHasExactSizeAndEncodesAnything) {
  Result<ClipTokenizer> tiny = MakeTinyClipTokenizer(1000);
  ASSERT_TRUE(tiny.ok()) << tiny.status().ToString();
  EXPECT_EQ(tiny->vocab_size(), 1000);
  EXPECT_EQ(tiny->sot_id(), 998);
  EXPECT_EQ(tiny->eot_id(), 999);
  EXPECT_EQ(tiny->merges().size(), 1000u - 514u);

  // Common caption words become one token; anything else falls back to bytes, never unknown.
  EXPECT_EQ(tiny->Encode("red").size(), 1u);
  EXPECT_EQ(tiny->Encode("a red circle moving left on a blue background").size(), 9u);
  for (const std::string text :
       {"a red circle moving left on a blue background", "Zyxq 12345 ÉMOJI 🎬🐶 naïve — «x»",
        "\xff\xfe invalid utf8", "", "https://example.com/?a=1&b=2"}) {
    for (int id : tiny->EncodePadded(text)) {
      EXPECT_GE(id, 0);
      EXPECT_LT(id, 1000);
    }
  }

  TempDir dir;
  ASSERT_TRUE(WriteHfTokenizer(*tiny, dir.path()).ok());
  Result<ClipTokenizer> loaded = ClipTokenizer::Load(dir.path());
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->vocab_size(), 1000);
  EXPECT_EQ(loaded->eot_id(), 999);
  for (const std::string text : {"a green square growing on a gradient background", "Zyxq 42"}) {
    EXPECT_EQ(loaded->EncodePadded(text), tiny->EncodePadded(text)) << text;
  }
  // Deterministic.
  Result<ClipTokenizer> again = MakeTinyClipTokenizer(1000);
  ASSERT_TRUE(again.ok());
  EXPECT_EQ(again->merges(), tiny->merges());
}

TEST(ClipTokenizerTest, TinyVocabularyRejectsBadSizes) {
  Result<ClipTokenizer> small = MakeTinyClipTokenizer(100);
  ASSERT_FALSE(small.ok());
  EXPECT_NE(small.status().message().find("514"), std::string::npos);
  Result<ClipTokenizer> huge = MakeTinyClipTokenizer(1000000);
  ASSERT_FALSE(huge.ok());
  EXPECT_NE(huge.status().message().find("too large"), std::string::npos);
}

TEST(ClipTokenizerTest, ErrorsNameTheFileAndProblem) {
  TempDir dir;
  Result<ClipTokenizer> missing = ClipTokenizer::Load(dir.file("nope.txt.gz"));
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("nope.txt.gz"), std::string::npos);

  WriteText(dir.file("plain.txt.gz"), "#version\nh e\n");
  Result<ClipTokenizer> not_gzip = ClipTokenizer::Load(dir.file("plain.txt.gz"));
  ASSERT_FALSE(not_gzip.ok());
  EXPECT_NE(not_gzip.status().message().find("not a gzip file"), std::string::npos);

  // CLIP's file cut in half: zlib reports the stream ends early.
  {
    std::ifstream in(kClipGz, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    WriteText(dir.file("half.txt.gz"), bytes.substr(0, bytes.size() / 2));
  }
  Result<ClipTokenizer> half = ClipTokenizer::Load(dir.file("half.txt.gz"));
  ASSERT_FALSE(half.ok());
  EXPECT_EQ(half.status().code(), StatusCode::kDataLoss);
  EXPECT_NE(half.status().message().find("half.txt.gz"), std::string::npos);
  EXPECT_NE(half.status().message().find("gzip"), std::string::npos) << half.status().message();

  // A folder whose merges.txt has a malformed line 3.
  Result<ClipTokenizer> tiny = MakeTinyClipTokenizer(600);
  ASSERT_TRUE(tiny.ok());
  std::string folder = dir.file("corrupt");
  ASSERT_TRUE(WriteHfTokenizer(*tiny, folder).ok());
  WriteText(folder + "/merges.txt", "#version: 0.2\nt h</w>\nthis line has four\n");
  Result<ClipTokenizer> corrupt = ClipTokenizer::Load(folder);
  ASSERT_FALSE(corrupt.ok());
  EXPECT_NE(corrupt.status().message().find("merges.txt: malformed merges line 3"),
            std::string::npos)
      << corrupt.status().message();

  // A merge whose result is not in vocab.json.
  WriteText(folder + "/merges.txt", "#version: 0.2\nq z</w>\n");
  Result<ClipTokenizer> unknown = ClipTokenizer::Load(folder);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("'qz</w>' missing from the vocabulary"),
            std::string::npos)
      << unknown.status().message();

  std::remove((folder + "/vocab.json").c_str());
  Result<ClipTokenizer> no_vocab = ClipTokenizer::Load(folder);
  ASSERT_FALSE(no_vocab.ok());
  EXPECT_NE(no_vocab.status().message().find("vocab.json"), std::string::npos);
}

TEST(ClipTokenizerTest, EncodeFromSeveralThreads) {
  Result<ClipTokenizer> tokenizer = ClipTokenizer::Load(kClipGz);
  ASSERT_TRUE(tokenizer.ok());
  nlohmann::json cases = Cases();
  std::vector<std::thread> threads;
  std::vector<int> failures(4, 0);
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&, t] {
      for (int round = 0; round < 20; ++round) {
        for (const auto& c : cases["cases"]) {
          if (tokenizer->Encode(c["text"].get<std::string>()) != c["ids"].get<std::vector<int>>()) {
            ++failures[t];
          }
        }
      }
    });
  }
  for (auto& th : threads) th.join();
  EXPECT_EQ(failures, std::vector<int>(4, 0));
}

TEST(TokenizeCommandTest, PrintsOneJsonArrayPerText) {
  std::ostringstream out, err;
  EXPECT_EQ(RunTokenizeCommand(kClipGz, {"a dog running on the beach", ""}, out, err), 0);
  EXPECT_EQ(out.str(), "[320,1929,2761,525,518,2117]\n[]\n");
  EXPECT_EQ(err.str(), "");

  std::ostringstream out2, err2;
  EXPECT_EQ(RunTokenizeCommand("/nonexistent/vocab.gz", {"x"}, out2, err2), 2);
  EXPECT_EQ(out2.str(), "");
  EXPECT_NE(err2.str().find("/nonexistent/vocab.gz"), std::string::npos);
}

}  // namespace
}  // namespace adctl

#include "worker/video/video_csv.h"

#include <gtest/gtest.h>

#include <fstream>

#include "tests/testing/temp_dir.h"

namespace adctl {
namespace {

std::string Write(const TempDir& dir, const std::string& name, const std::string& text) {
  std::string path = dir.file(name);
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

TEST(VideoCsvTest, ReadsWebVidRowsWithRfc4180Quoting) {
  TempDir dir;
  std::string csv = Write(dir, "results_2M_val.csv",
                          "\xEF\xBB\xBFvideoid,name,page_dir\r\n"
                          "1066692580,\"Aerial shot, winter forest\",006001_006050\r\n"
                          "\r\n"
                          "42,\"He said \"\"hi\"\"\",p\n"
                          "7,\"two\nlines\r\nthree\",p\n"
                          "8, spaced caption ,p");  // no final line break
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(csv, "/data/videos");
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 4u);
  EXPECT_EQ((*entries)[0].video_id, "1066692580");
  EXPECT_EQ((*entries)[0].caption, "Aerial shot, winter forest");
  EXPECT_EQ((*entries)[0].path, "/data/videos/1066692580.mp4");
  EXPECT_EQ((*entries)[1].caption, "He said \"hi\"");
  EXPECT_EQ((*entries)[2].caption, "two\nlines\r\nthree");
  EXPECT_EQ((*entries)[3].caption, " spaced caption ");  // RFC 4180 keeps spaces

  // Without a video folder, paths are relative to the CSV's folder.
  Result<std::vector<VideoEntry>> beside = ReadVideoCsv(csv);
  ASSERT_TRUE(beside.ok());
  EXPECT_EQ((*beside)[1].path, dir.path() + "/42.mp4");
}

TEST(VideoCsvTest, ConfigurableColumnsAndPattern) {
  TempDir dir;
  std::string csv = Write(dir, "clips.csv", "id,text,page_dir\na1,a cat,000_050\n");
  VideoCsvOptions options;
  options.id_column = "id";
  options.caption_column = "text";
  options.file_pattern = "{page_dir}/{id}.webm";
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(csv, "/v", options);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), 1u);
  EXPECT_EQ((*entries)[0].caption, "a cat");
  EXPECT_EQ((*entries)[0].path, "/v/000_050/a1.webm");

  options.file_pattern = "{folder}/{id}.mp4";
  Result<std::vector<VideoEntry>> unknown = ReadVideoCsv(csv, "/v", options);
  ASSERT_FALSE(unknown.ok());
  EXPECT_NE(unknown.status().message().find("names column 'folder'"), std::string::npos)
      << unknown.status().message();
}

TEST(VideoCsvTest, MissingCaptionColumnSaysWhichAndHowManyColumns) {
  TempDir dir;
  std::string csv = Write(dir, "bad_header.csv", "videoid,caption,page_dir\n1,x,p\n");
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(csv);
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().code(), StatusCode::kInvalidArgument);
  EXPECT_NE(entries.status().message().find("bad_header.csv"), std::string::npos);
  EXPECT_NE(entries.status().message().find("no column 'name' (caption): the header's 3 column(s) "
                                            "lack it"),
            std::string::npos)
      << entries.status().message();
}

// A spec may name any file as its CSV: what the file holds never comes back in a message (an
// event or a job's error would hand it to whoever submitted the job).
TEST(VideoCsvTest, MessagesNeverQuoteTheFile) {
  TempDir dir;
  const std::string secret = "root:$y$j9T$SECRETHASH:19700:0:99999:7:::";
  std::string shadow = Write(dir, "shadow", secret + "\ndaemon:*:19700:0:99999:7:::\n");
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(shadow);
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().message().find("SECRETHASH"), std::string::npos)
      << entries.status().message();
  EXPECT_EQ(entries.status().message().find("root:"), std::string::npos)
      << entries.status().message();
  EXPECT_NE(entries.status().message().find("shadow"), std::string::npos);

  VideoCsvOptions options;
  options.id_column = "videoid";
  options.file_pattern = "{" + secret + "}.mp4";
  std::string csv = Write(dir, "ok.csv", "videoid,name\n1,a\n");
  entries = ReadVideoCsv(csv, "", options);
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().message().find("videoid"), std::string::npos)
      << "the header's names are the file's bytes: " << entries.status().message();
}

// Video ids and pattern columns come from the file: none leads outside the video folder.
TEST(VideoCsvTest, RowsCannotNameFilesOutsideTheVideoFolder) {
  TempDir dir;
  for (const std::string& id : {std::string("../../etc/passwd"), std::string("a/../../b"),
                                std::string(".."), std::string("/etc/passwd")}) {
    std::string csv =
        Write(dir, "escape.csv", "videoid,name,page_dir\n1,ok,p\n\"" + id + "\",bad,p\n");
    VideoCsvOptions options;
    options.file_pattern = "{videoid}";
    Result<std::vector<VideoEntry>> entries = ReadVideoCsv(csv, "/data/videos", options);
    ASSERT_FALSE(entries.ok()) << id;
    EXPECT_EQ(entries.status().code(), StatusCode::kInvalidArgument);
    EXPECT_NE(entries.status().message().find("escape.csv: line 3:"), std::string::npos)
        << entries.status().message();
  }
  // A `..` inside a name is no parent folder.
  std::string fine = Write(dir, "fine.csv", "videoid,name,page_dir\na..b,ok,p\n");
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(fine, "/data/videos");
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  EXPECT_EQ((*entries)[0].path, "/data/videos/a..b.mp4");
}

TEST(VideoCsvTest, ErrorsNameFileAndLine) {
  TempDir dir;
  // Line 4 has two fields; the row before spans lines 2-3.
  std::string short_row = Write(dir, "short.csv", "videoid,name,page_dir\n1,\"a\nb\",p\n2,c\n");
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(short_row);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("short.csv: line 4: 2 fields, the header has 3"),
            std::string::npos)
      << entries.status().message();

  // A caption with an unquoted comma.
  std::string comma = Write(dir, "comma.csv", "videoid,name,page_dir\n1,ok,p\n2,a, b,p\n");
  entries = ReadVideoCsv(comma);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("line 3: 4 fields"), std::string::npos)
      << entries.status().message();

  std::string quote = Write(dir, "quote.csv", "videoid,name,page_dir\n1,\"a\"b,p\n");
  entries = ReadVideoCsv(quote);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("quote.csv: line 2: malformed CSV"), std::string::npos)
      << entries.status().message();

  std::string open = Write(dir, "open.csv", "videoid,name,page_dir\n1,\"never closed,p\n");
  entries = ReadVideoCsv(open);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("not closed"), std::string::npos);

  std::string empty_id = Write(dir, "empty_id.csv", "videoid,name,page_dir\n,cap,p\n");
  entries = ReadVideoCsv(empty_id);
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("line 2: empty 'videoid'"), std::string::npos);

  entries = ReadVideoCsv(dir.file("absent.csv"));
  ASSERT_FALSE(entries.ok());
  EXPECT_EQ(entries.status().code(), StatusCode::kNotFound);
  EXPECT_NE(entries.status().message().find("absent.csv"), std::string::npos);

  entries = ReadVideoCsv(Write(dir, "blank.csv", ""));
  ASSERT_FALSE(entries.ok());
  EXPECT_NE(entries.status().message().find("empty file"), std::string::npos);
}

TEST(VideoCsvTest, WriteCsvRoundTrips) {
  TempDir dir;
  std::vector<std::vector<std::string>> rows = {
      {"1", "plain caption", "p"},
      {"2", "comma, \"quotes\" and\nnewline", "p"},
      {"3", " leading space", "p"},
      {"4", "", "p"},
  };
  std::string path = dir.file("out.csv");
  ASSERT_TRUE(WriteCsv(path, {"videoid", "name", "page_dir"}, rows).ok());
  Result<std::vector<VideoEntry>> entries = ReadVideoCsv(path);
  ASSERT_TRUE(entries.ok()) << entries.status().ToString();
  ASSERT_EQ(entries->size(), rows.size());
  for (size_t i = 0; i < rows.size(); ++i) {
    EXPECT_EQ((*entries)[i].video_id, rows[i][0]);
    EXPECT_EQ((*entries)[i].caption, rows[i][1]);
  }
  EXPECT_FALSE(WriteCsv(dir.file("no/dir/x.csv"), {"a"}, {}).ok());
}

}  // namespace
}  // namespace adctl

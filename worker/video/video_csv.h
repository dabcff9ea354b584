// The index of a video-caption dataset: a WebVid-style CSV (header `videoid,name,page_dir`, one
// clip per row) and the folder holding the videos, as AnimateDiff's WebVid10M dataset reads it
// (`{video_folder}/{videoid}.mp4`, caption from column `name`).
//
// Parsing is RFC 4180 through libcsv (strict mode): fields in double quotes may hold commas,
// doubled quotes and line breaks; spaces are kept; CRLF or LF line ends; a UTF-8 byte-order mark
// is skipped; blank lines are ignored. Line numbers in errors count '\n' from 1 and name the line
// where the row starts. Pure functions; thread-safe.
#pragma once

#include <string>
#include <vector>

#include "common/status.h"

namespace adctl {

struct VideoCsvOptions {
  std::string id_column = "videoid";
  std::string caption_column = "name";
  // The video's path relative to the video folder; `{column}` is replaced by that column's value
  // in the row, e.g. "{page_dir}/{videoid}.mp4" for WebVid's own layout.
  std::string file_pattern = "{videoid}.mp4";
};

struct VideoEntry {
  std::string video_id;
  std::string caption;
  std::string path;  // video folder + file pattern
};

// Reads `csv_path`; paths are relative to `video_dir` (the CSV's folder when empty). Errors name
// the file and line: a missing file (NotFound), malformed quoting, a row with a different number
// of fields than the header, an empty id, a missing id or caption column (the message lists the
// columns found), a pattern naming an unknown column.
Result<std::vector<VideoEntry>> ReadVideoCsv(const std::string& csv_path,
                                             const std::string& video_dir = "",
                                             const VideoCsvOptions& options = {});

// Writes a CSV (header, then rows), quoting a field when it holds a comma, quote, CR or LF or
// starts or ends with a space. Errors name the file.
Status WriteCsv(const std::string& path, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows);

}  // namespace adctl

#include "worker/video/video_csv.h"

#include <csv.h>

#include <fstream>
#include <map>
#include <memory>
#include <sstream>

namespace adctl {
namespace {

struct Row {
  std::vector<std::string> fields;
  int line = 0;  // where the row starts
};

// libcsv callback state: the current row, finished rows, the line being fed.
struct ParseState {
  std::vector<std::string> fields;
  std::vector<Row> rows;
  int line = 0;
};

void OnField(void* data, size_t len, void* state_ptr) {
  auto* state = static_cast<ParseState*>(state_ptr);
  state->fields.emplace_back(data == nullptr ? "" : std::string(static_cast<char*>(data), len));
}

void OnRowEnd(int /*terminator*/, void* state_ptr) {
  auto* state = static_cast<ParseState*>(state_ptr);
  int embedded = 0;  // line breaks inside quoted fields: the row started that many lines earlier
  for (const std::string& f : state->fields) {
    for (char c : f) embedded += c == '\n';
  }
  state->rows.push_back({std::move(state->fields), state->line - embedded});
  state->fields.clear();
}

int NoSpaces(unsigned char) { return 0; }  // RFC 4180: spaces belong to the field

Result<std::vector<Row>> ParseCsv(const std::string& path, const std::string& text) {
  struct csv_parser parser;
  if (csv_init(&parser, CSV_STRICT | CSV_STRICT_FINI) != 0) {
    return Internal(path + ": cannot initialise the CSV parser");
  }
  std::unique_ptr<csv_parser, void (*)(csv_parser*)> owner(&parser, csv_free);
  csv_set_space_func(&parser, NoSpaces);
  ParseState state;
  size_t start = text.compare(0, 3, "\xEF\xBB\xBF") == 0 ? 3 : 0;
  // Fed one line at a time so that the callbacks know the line number.
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    end = end == std::string::npos ? text.size() : end + 1;
    ++state.line;
    size_t len = end - start;
    if (csv_parse(&parser, text.data() + start, len, OnField, OnRowEnd, &state) != len) {
      return InvalidArgument(path + ": line " + std::to_string(state.line) + ": malformed CSV (" +
                             csv_strerror(csv_error(&parser)) +
                             "; a quote inside a field must be doubled and the field quoted)");
    }
    start = end;
  }
  if (csv_fini(&parser, OnField, OnRowEnd, &state) != 0) {
    return InvalidArgument(path + ": a quoted field is not closed before the end of the file");
  }
  return std::move(state.rows);
}

// The header's size, not its names: a message never quotes the file (it may be a file the job
// may not read, named as its CSV).
std::string HeaderSize(const std::vector<std::string>& header) {
  return "the header's " + std::to_string(header.size()) + " column(s) lack it";
}

// A video's path under the video folder, from the pattern and the row: relative, with no `..`
// component and no NUL byte, so that no row can name a file outside the folder.
bool IsContainedRelativePath(const std::string& relative) {
  if (relative.empty() || relative[0] == '/' || relative.find('\0') != std::string::npos) {
    return false;
  }
  size_t start = 0;
  while (start <= relative.size()) {
    size_t end = relative.find('/', start);
    if (end == std::string::npos) end = relative.size();
    if (relative.compare(start, end - start, "..") == 0 && end - start == 2) return false;
    start = end + 1;
  }
  return true;
}

// The pattern as literal text and column references, checked against the header.
struct PatternPart {
  bool is_column;
  std::string text;  // literal, or column name
  size_t column = 0;
};

Result<std::vector<PatternPart>> ParsePattern(const std::string& csv_path,
                                              const std::string& pattern,
                                              const std::map<std::string, size_t>& columns,
                                              const std::vector<std::string>& header) {
  std::vector<PatternPart> parts;
  size_t pos = 0;
  while (pos < pattern.size()) {
    size_t open = pattern.find('{', pos);
    if (open == std::string::npos) {
      parts.push_back({false, pattern.substr(pos)});
      break;
    }
    if (open > pos) parts.push_back({false, pattern.substr(pos, open - pos)});
    size_t close = pattern.find('}', open);
    if (close == std::string::npos) {
      return InvalidArgument("file pattern '" + pattern + "': '{' without '}'");
    }
    std::string name = pattern.substr(open + 1, close - open - 1);
    auto it = columns.find(name);
    if (it == columns.end()) {
      return InvalidArgument(csv_path + ": file pattern '" + pattern + "' names column '" + name +
                             "', but " + HeaderSize(header));
    }
    parts.push_back({true, name, it->second});
    pos = close + 1;
  }
  return parts;
}

std::string QuoteField(const std::string& field) {
  bool needs = field.find_first_of(",\"\r\n") != std::string::npos ||
               (!field.empty() && (field.front() == ' ' || field.back() == ' '));
  if (!needs) return field;
  std::string out = "\"";
  for (char c : field) {
    if (c == '"') out += '"';
    out += c;
  }
  return out + "\"";
}

}  // namespace

Result<std::vector<VideoEntry>> ReadVideoCsv(const std::string& csv_path,
                                             const std::string& video_dir,
                                             const VideoCsvOptions& options) {
  std::ifstream in(csv_path, std::ios::binary);
  if (!in) return NotFound(csv_path + ": dataset CSV missing or unreadable");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  Result<std::vector<Row>> rows = ParseCsv(csv_path, buffer.str());
  if (!rows.ok()) return rows.status();
  if (rows->empty()) return InvalidArgument(csv_path + ": empty file (no header line)");

  const std::vector<std::string>& header = (*rows)[0].fields;
  std::map<std::string, size_t> columns;
  for (size_t i = 0; i < header.size(); ++i) columns.emplace(header[i], i);
  for (const std::string* wanted : {&options.id_column, &options.caption_column}) {
    if (columns.count(*wanted) == 0) {
      return InvalidArgument(csv_path + ": no column '" + *wanted + "' (" +
                             (wanted == &options.id_column ? "video id" : "caption") +
                             "): " + HeaderSize(header));
    }
  }
  Result<std::vector<PatternPart>> pattern =
      ParsePattern(csv_path, options.file_pattern, columns, header);
  if (!pattern.ok()) return pattern.status();
  std::string folder = video_dir;
  if (folder.empty()) {
    size_t slash = csv_path.rfind('/');
    folder = slash == std::string::npos ? "." : csv_path.substr(0, slash);
  }

  const size_t id_column = columns[options.id_column];
  const size_t caption_column = columns[options.caption_column];
  std::vector<VideoEntry> entries;
  entries.reserve(rows->size() - 1);
  for (size_t r = 1; r < rows->size(); ++r) {
    const Row& row = (*rows)[r];
    if (row.fields.size() != header.size()) {
      return InvalidArgument(csv_path + ": line " + std::to_string(row.line) + ": " +
                             std::to_string(row.fields.size()) + " fields, the header has " +
                             std::to_string(header.size()) +
                             " (a field with a comma must be quoted)");
    }
    VideoEntry entry;
    entry.video_id = row.fields[id_column];
    entry.caption = row.fields[caption_column];
    if (entry.video_id.empty()) {
      return InvalidArgument(csv_path + ": line " + std::to_string(row.line) + ": empty '" +
                             options.id_column + "'");
    }
    std::string relative;
    for (const PatternPart& part : *pattern) {
      relative += part.is_column ? row.fields[part.column] : part.text;
    }
    if (!IsContainedRelativePath(relative)) {
      return InvalidArgument(csv_path + ": line " + std::to_string(row.line) +
                             ": the video's path from data.file_pattern '" + options.file_pattern +
                             "' is absolute or has a '..' component or a NUL byte; it must stay "
                             "under the video folder");
    }
    entry.path = folder + "/" + relative;
    entries.push_back(std::move(entry));
  }
  return entries;
}

Status WriteCsv(const std::string& path, const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  auto write_row = [&](const std::vector<std::string>& fields) {
    for (size_t i = 0; i < fields.size(); ++i) out << (i ? "," : "") << QuoteField(fields[i]);
    out << "\n";
  };
  write_row(header);
  for (const auto& row : rows) write_row(row);
  out.close();
  if (!out) return Internal(path + ": cannot write the CSV");
  return Status::Ok();
}

}  // namespace adctl

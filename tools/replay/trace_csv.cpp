#include "trace_csv.h"

#include <array>
#include <charconv>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <sstream>
#include <system_error>

namespace cudacache::replay {
namespace {

constexpr std::string_view kHeader = "op,id,size,stream";
constexpr std::string_view kStdinPath = "-";

struct LineContext {
  const std::string& source;
  std::size_t line_number;

  [[noreturn]] void fail(const std::string& what) const {
    throw TraceError(source + ":" + std::to_string(line_number) + ": " + what);
  }
};

// A field as an error message shows it: in quotes, bytes that are not printable ASCII as \xNN
// (a terminal would act on an escape sequence or a lone carriage return), and no more than
// kShownBytes of it (a malformed trace can hold a line of any length).
std::string quoted(std::string_view field) {
  constexpr std::size_t kShownBytes = 64;
  std::string text = "'";
  for (const char c : field.substr(0, kShownBytes)) {
    const auto byte = static_cast<unsigned char>(c);
    if (byte >= 0x20 && byte < 0x7f && byte != '\\') {
      text += c;
    } else {
      constexpr char kHex[] = "0123456789abcdef";
      text += "\\x";
      text += kHex[byte >> 4];
      text += kHex[byte & 0xf];
    }
  }
  text += '\'';
  if (field.size() > kShownBytes) {
    text += " (its first " + std::to_string(kShownBytes) + " of " + std::to_string(field.size()) +
            " bytes)";
  }
  return text;
}

std::uint64_t parse_unsigned(std::string_view field, const char* what, const LineContext& ctx) {
  if (field.empty()) ctx.fail(std::string("missing ") + what);
  if (field.front() == '-') ctx.fail(std::string("negative ") + what + " " + quoted(field));
  std::uint64_t value = 0;
  auto [end, error] = std::from_chars(field.data(), field.data() + field.size(), value);
  if (error == std::errc::result_out_of_range) {
    ctx.fail(std::string(what) + " " + quoted(field) + " is too large");
  }
  if (error != std::errc() || end != field.data() + field.size()) {
    ctx.fail(std::string("non-numeric ") + what + " " + quoted(field));
  }
  return value;
}

// Splits "a,b,c,d" into exactly four fields; anything else is a malformed line.
std::array<std::string_view, 4> split_fields(std::string_view line, const LineContext& ctx) {
  std::array<std::string_view, 4> fields;
  std::size_t count = 0;
  std::size_t start = 0;
  while (true) {
    std::size_t comma = line.find(',', start);
    std::string_view field = line.substr(
        start, comma == std::string_view::npos ? std::string_view::npos : comma - start);
    if (count == fields.size()) ctx.fail("too many fields (expected op,id,size,stream)");
    fields[count++] = field;
    if (comma == std::string_view::npos) break;
    start = comma + 1;
  }
  if (count != fields.size()) {
    ctx.fail("truncated line: " + std::to_string(count) + " of 4 fields (op,id,size,stream)");
  }
  return fields;
}

TraceEvent parse_event(std::string_view line, const LineContext& ctx) {
  auto fields = split_fields(line, ctx);
  TraceEvent event;
  if (fields[0] == "empty_cache") {
    if (!fields[1].empty() || !fields[2].empty() || !fields[3].empty()) {
      ctx.fail("an empty_cache row takes no id, size or stream ('empty_cache,,,')");
    }
    event.op = TraceOp::kEmptyCache;
    return event;
  }
  if (fields[0] == "alloc") {
    event.op = TraceOp::kAlloc;
  } else if (fields[0] == "free") {
    event.op = TraceOp::kFree;
  } else {
    ctx.fail("unknown op " + quoted(fields[0]) + " (expected alloc, free or empty_cache)");
  }
  event.id = parse_unsigned(fields[1], "id", ctx);
  event.size = parse_unsigned(fields[2], "size", ctx);
  std::uint64_t stream = parse_unsigned(fields[3], "stream", ctx);
  if (stream > kMaxStreamNumber) {  // before the cast below; finalize_trace checks it too
    ctx.fail("stream " + std::to_string(stream) + " is above the supported maximum " +
             std::to_string(kMaxStreamNumber));
  }
  event.stream = static_cast<std::uint32_t>(stream);
  return event;
}

}  // namespace

Trace parse_trace_csv(std::string_view text, const std::string& source) {
  Trace trace;
  trace.name = source;
  // A UTF-8 byte order mark (spreadsheets write one) is not part of the header: it made the
  // header look right in the message and still refused it.
  if (text.starts_with("\xEF\xBB\xBF")) text.remove_prefix(3);
  std::vector<std::size_t> line_of_event;
  std::size_t line_number = 0;
  std::size_t position = 0;
  bool saw_header = false;
  while (position < text.size()) {
    std::size_t newline = text.find('\n', position);
    std::string_view line = text.substr(
        position, newline == std::string_view::npos ? std::string_view::npos : newline - position);
    position = newline == std::string_view::npos ? text.size() : newline + 1;
    ++line_number;
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    LineContext ctx{source, line_number};
    if (!saw_header) {
      if (line != kHeader) {
        ctx.fail("bad header " + quoted(line) + " (expected '" + std::string(kHeader) + "')");
      }
      saw_header = true;
      continue;
    }
    if (line.empty()) {
      // Only a final newline may leave an empty line; an empty line inside is malformed.
      if (position >= text.size()) break;
      ctx.fail("empty line");
    }
    trace.events.push_back(parse_event(line, ctx));
    line_of_event.push_back(line_number);
  }
  if (!saw_header)
    throw TraceError(source + ":1: empty file (expected header '" + std::string(kHeader) + "')");
  finalize_trace(trace,
                 [&](std::size_t i) { return source + ":" + std::to_string(line_of_event[i]); });
  return trace;
}

std::string read_file_bytes(const std::string& path) {
  // An ifstream opens a directory and then reads nothing: say what it is instead.
  std::error_code error;
  if (std::filesystem::is_directory(path, error)) {
    throw TraceError(path + ": is a directory (expected a file)");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw TraceError(path + ": cannot open file");
  std::ostringstream buffer;
  buffer << in.rdbuf();
  if (in.bad()) throw TraceError(path + ": read error");
  return std::move(buffer).str();
}

std::string input_display_name(const std::string& path) {
  return path == kStdinPath ? "<stdin>" : path;
}

std::string read_trace_bytes(const std::string& path) {
  std::string bytes;
  if (path == kStdinPath) {
    std::ostringstream buffer;
    buffer << std::cin.rdbuf();
    if (std::cin.bad()) throw TraceError("<stdin>: read error");
    bytes = std::move(buffer).str();
  } else {
    bytes = read_file_bytes(path);
  }
  if (bytes.size() >= 2 && static_cast<unsigned char>(bytes[0]) == 0x1f &&
      static_cast<unsigned char>(bytes[1]) == 0x8b) {
    const std::string example =
        path == kStdinPath ? "gunzip -c FILE.gz | cudacache-replay -" : "gunzip -k " + path;
    throw TraceError(input_display_name(path) +
                     ": gzip-compressed (magic bytes 1f 8b); decompress it first, e.g. " + example);
  }
  return bytes;
}

std::string trace_name_from_path(const std::string& path) {
  if (path == kStdinPath) return "stdin";
  return std::filesystem::path(path).stem().string();
}

Trace read_trace_csv(const std::string& path) {
  Trace trace = parse_trace_csv(read_trace_bytes(path), input_display_name(path));
  trace.name = trace_name_from_path(path);
  return trace;
}

void write_trace_csv(const Trace& trace, std::ostream& out) {
  out << kHeader << '\n';
  for (const TraceEvent& event : trace.events) {
    switch (event.op) {
      case TraceOp::kAlloc:
        out << "alloc," << event.id << ',' << event.size << ',' << event.stream << '\n';
        break;
      case TraceOp::kFree:
        out << "free," << event.id << ',' << event.size << ',' << event.stream << '\n';
        break;
      case TraceOp::kEmptyCache: out << "empty_cache,,,\n"; break;
    }
  }
}

}  // namespace cudacache::replay

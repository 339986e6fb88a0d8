// A minimal JSON writer: appends to a std::string, no allocation beyond it.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

#include "utf8.h"

namespace cudacache {

class JsonWriter {
 public:
  void begin_object() {
    separate();
    text_ += '{';
    first_ = true;
  }
  void end_object() {
    text_ += '}';
    first_ = false;
  }
  void begin_array() {
    separate();
    text_ += '[';
    first_ = true;
  }
  void end_array() {
    text_ += ']';
    first_ = false;
  }

  void key(std::string_view name) {
    separate();
    append_string(name);
    text_ += ':';
    first_ = true;  // the value follows without a comma
  }
  void value(std::string_view text) {
    separate();
    append_string(text);
  }
  void value(const char* text) { value(std::string_view(text)); }
  void value(bool flag) {
    separate();
    text_ += flag ? "true" : "false";
  }
  void value(std::int64_t number) {
    separate();
    text_ += std::to_string(number);
  }
  void value(std::uint64_t number) {
    separate();
    text_ += std::to_string(number);
  }
  void value(double number) {  // finite numbers only: JSON has no NaN or infinity
    separate();
    char text[32];
    std::snprintf(text, sizeof text, "%.6g", number);
    text_ += text;
  }

  template <typename T>
  void field(std::string_view name, const T& v) {
    key(name);
    value(v);
  }

  const std::string& str() const { return text_; }

 private:
  void separate() {
    if (!first_) text_ += ',';
    first_ = false;
  }
  // Control characters and bytes that are not valid UTF-8 (utf8.h) become \u00XX: the byte read
  // as Latin-1, so that the document stays valid JSON whatever encoding a name came in.
  void append_string(std::string_view text) {
    static constexpr char kHex[] = "0123456789abcdef";
    text_ += '"';
    for (std::size_t i = 0; i < text.size();) {
      const auto c = static_cast<unsigned char>(text[i]);
      if (c == '"' || c == '\\') {
        text_ += '\\';
        text_ += static_cast<char>(c);
        ++i;
        continue;
      }
      const std::size_t length = c < 0x20 ? 0 : utf8_sequence_length(text, i);
      if (length == 0) {
        text_ += "\\u00";
        text_ += kHex[c >> 4];
        text_ += kHex[c & 0xf];
        ++i;
        continue;
      }
      text_.append(text, i, length);
      i += length;
    }
    text_ += '"';
  }

  std::string text_;
  bool first_ = true;
};

}  // namespace cudacache

// Test helper: a strict little JSON reader, so tests can check that the tool's JSON parses
// and has the promised shape.
#pragma once

#include <cctype>
#include <cstdlib>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace cudacache::replay::testing {

struct Json {
  enum class Type { kNull, kBool, kNumber, kString, kArray, kObject } type = Type::kNull;
  bool boolean = false;
  double number = 0;
  std::string text;
  std::vector<Json> array;
  std::map<std::string, Json> object;

  const Json& at(const std::string& key) const {
    auto it = object.find(key);
    if (type != Type::kObject || it == object.end()) throw std::runtime_error("no key " + key);
    return it->second;
  }
  bool has(const std::string& key) const { return type == Type::kObject && object.count(key) != 0; }
};

class JsonReader {
 public:
  explicit JsonReader(const std::string& text) : text_(text) {}

  Json read() {
    Json value = parse_value();
    skip_space();
    if (pos_ != text_.size()) fail("trailing characters");
    return value;
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw std::runtime_error("JSON: " + what + " at " + std::to_string(pos_));
  }
  void skip_space() {
    while (pos_ < text_.size() && std::isspace(static_cast<unsigned char>(text_[pos_]))) ++pos_;
  }
  bool consume(const std::string& word) {
    if (text_.compare(pos_, word.size(), word) != 0) return false;
    pos_ += word.size();
    return true;
  }
  void expect(char c) {
    skip_space();
    if (pos_ >= text_.size() || text_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  std::string parse_string() {
    expect('"');
    std::string out;
    while (pos_ < text_.size() && text_[pos_] != '"') {
      if (text_[pos_] == '\\') {
        ++pos_;
        if (pos_ >= text_.size()) fail("bad escape");
        char e = text_[pos_];
        if (e == 'u') {
          pos_ += 4;
          out += '?';
        } else {
          out += e == 'n' ? '\n' : e == 't' ? '\t' : e == 'r' ? '\r' : e;
        }
        ++pos_;
      } else {
        out += text_[pos_++];
      }
    }
    expect('"');
    return out;
  }
  Json parse_value() {
    skip_space();
    Json value;
    if (pos_ >= text_.size()) fail("unexpected end");
    char c = text_[pos_];
    if (c == '{') {
      value.type = Json::Type::kObject;
      ++pos_;
      skip_space();
      if (text_[pos_] == '}') {
        ++pos_;
        return value;
      }
      while (true) {
        std::string key = parse_string();
        expect(':');
        value.object[key] = parse_value();
        skip_space();
        if (text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return value;
      }
    }
    if (c == '[') {
      value.type = Json::Type::kArray;
      ++pos_;
      skip_space();
      if (text_[pos_] == ']') {
        ++pos_;
        return value;
      }
      while (true) {
        value.array.push_back(parse_value());
        skip_space();
        if (text_[pos_] == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return value;
      }
    }
    if (c == '"') {
      value.type = Json::Type::kString;
      value.text = parse_string();
      return value;
    }
    if (consume("null")) return value;
    if (consume("true")) {
      value.type = Json::Type::kBool;
      value.boolean = true;
      return value;
    }
    if (consume("false")) {
      value.type = Json::Type::kBool;
      return value;
    }
    const char* start = text_.c_str() + pos_;
    char* end = nullptr;
    value.number = std::strtod(start, &end);
    if (end == start) fail("bad value");
    value.type = Json::Type::kNumber;
    pos_ += static_cast<std::size_t>(end - start);
    return value;
  }

  const std::string& text_;
  std::size_t pos_ = 0;
};

}  // namespace cudacache::replay::testing

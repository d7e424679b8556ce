// JSON text written value by value, byte for byte as nlohmann's dump of the
// same tree writes it (compact for indent < 0, else pretty with `indent`
// spaces a level), for the text the server writes most: an agent's answer
// (agent_protocol.cc's AnswerText), where building the tree and dumping it
// cost ten times the writing. A test compares the two byte for byte.
#pragma once

#include <algorithm>
#include <charconv>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

#include <nlohmann/json.hpp>

namespace rota::api {

class TextWriter {
 public:
  TextWriter(std::string* out, int indent) : out_(*out), indent_(indent) {}

  void BeginObject() { Open('{'); }
  void EndObject() { Close('}'); }
  void BeginArray() { Open('['); }
  void EndArray() { Close(']'); }
  void Key(std::string_view key) {
    Element();
    Quoted(key);
    out_ += indent_ < 0 ? ":" : ": ";
    keyed_ = true;
  }
  void String(std::string_view s) {
    Value();
    Quoted(s);
  }
  template <typename T>
  void Number(T v) {
    // (Integers only: to_chars writes 1.0 as "1", nlohmann as "1.0".)
    static_assert(std::is_integral_v<T> && !std::is_same_v<T, bool>);
    Value();
    char buf[24];
    out_.append(buf, std::to_chars(buf, buf + sizeof buf, v).ptr);
  }
  void Bool(bool v) {
    Value();
    out_ += v ? "true" : "false";
  }
  template <typename T>
  void Field(std::string_view key, const T& v) {
    Key(key);
    if constexpr (std::is_same_v<T, bool>) Bool(v);
    else if constexpr (std::is_integral_v<T>) Number(v);
    else String(v);
  }
  void Strings(std::string_view key, const std::vector<std::string>& v) {
    Key(key);
    BeginArray();
    for (const std::string& s : v) String(s);
    EndArray();
  }

 private:
  void Quoted(std::string_view s) {
    // Printable ASCII but the two that need escaping is written as it is;
    // anything else as nlohmann escapes it (control characters, and
    // invalid UTF-8 replaced by U+FFFD).
    const bool plain = std::all_of(s.begin(), s.end(), [](char ch) {
      return ch >= 0x20 && ch <= 0x7e && ch != '"' && ch != '\\';
    });
    if (plain) {
      out_ += '"';
      out_ += s;
      out_ += '"';
    } else {
      out_ += nlohmann::json(std::string(s)).dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
    }
  }
  void Open(char ch) {
    Value();
    out_ += ch;
    ++depth_;
    empty_ = true;
  }
  void Close(char ch) {
    --depth_;
    if (!empty_ && indent_ >= 0) Newline();
    out_ += ch;
    empty_ = false;
  }
  // Before a key, or a value in an array: the separator and indentation.
  void Element() {
    if (!empty_) out_ += ',';
    if (indent_ >= 0) Newline();
    empty_ = false;
  }
  void Value() {
    if (keyed_) {
      keyed_ = false;
      return;
    }
    if (depth_ > 0) Element();
  }
  void Newline() {
    out_ += '\n';
    out_.append(static_cast<size_t>(depth_ * indent_), ' ');
  }

  std::string& out_;
  const int indent_;
  int depth_ = 0;
  bool empty_ = true;   // nothing yet in the innermost open object or array
  bool keyed_ = false;  // a key was written: the value follows it directly
};

}  // namespace rota::api

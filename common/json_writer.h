// Writes JSON text directly into a string, for documents built on the request path (the crash
// journal's line, the router's decision): a tree of nlohmann::json objects, each member a node of
// a std::map, costs tens of thousands of instructions for a record that takes a few thousand to
// write out by hand. Strings that are not UTF-8 are written with U+FFFD for the bad bytes, as
// JsonText does.
#pragma once

#include <charconv>
#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/json_text.h"
#include "common/utf8.h"

namespace kvgate {

class JsonWriter {
 public:
  JsonWriter() { out_.reserve(512); }

  JsonWriter& BeginObject() { return Open('{'); }
  JsonWriter& EndObject() { return Close('}'); }
  JsonWriter& BeginArray() { return Open('['); }
  JsonWriter& EndArray() { return Close(']'); }

  // An object member's name, written as it is: names come from kvgate's code (plain ASCII, no
  // quotes), never from input. The next call writes its value.
  JsonWriter& Key(std::string_view key) {
    if (need_comma_) out_ += ',';
    need_comma_ = false;
    after_key_ = true;
    out_ += '"';
    out_.append(key.data(), key.size());
    out_.append("\":", 2);
    return *this;
  }

  JsonWriter& String(std::string_view value) {
    BeforeValue();
    AppendString(value);
    return AfterValue();
  }
  JsonWriter& Int(int64_t value) {
    BeforeValue();
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    out_.append(digits, static_cast<size_t>(end - digits));
    return AfterValue();
  }
  JsonWriter& Double(double value) {
    if (!std::isfinite(value)) return Null();  // JSON has no NaN or infinity
    BeforeValue();
    char digits[32];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;  // shortest form
    const std::string_view text(digits, static_cast<size_t>(end - digits));
    out_.append(text.data(), text.size());
    // Still a float when read back (nlohmann and Python read "2" as an integer).
    if (text.find_first_of(".e") == std::string_view::npos) out_.append(".0", 2);
    return AfterValue();
  }
  JsonWriter& Bool(bool value) {
    BeforeValue();
    if (value) {
      out_.append("true", 4);
    } else {
      out_.append("false", 5);
    }
    return AfterValue();
  }
  JsonWriter& Null() {
    BeforeValue();
    out_.append("null", 4);
    return AfterValue();
  }
  JsonWriter& OptInt(const std::optional<int64_t>& value) { return value ? Int(*value) : Null(); }
  // JSON text written by someone else, as is ("" writes null).
  JsonWriter& Raw(std::string_view json_text) {
    if (json_text.empty()) return Null();
    BeforeValue();
    out_.append(json_text.data(), json_text.size());
    return AfterValue();
  }
  // A nlohmann value, written by walking it: nlohmann's own dump() costs several times as much
  // (it decodes every string byte by byte, and formats through a stream-like adapter). Members
  // come out in the tree's order, as dump() writes them.
  JsonWriter& Json(const nlohmann::json& value) {
    using Type = nlohmann::json::value_t;
    switch (value.type()) {
      case Type::object:
        BeginObject();
        for (const auto& [name, member] : value.get_ref<const nlohmann::json::object_t&>()) {
          if (need_comma_) out_ += ',';
          AppendString(name);  // unlike Key(), a name that may come from input: escaped
          out_ += ':';
          after_key_ = true;
          Json(member);
        }
        return EndObject();
      case Type::array:
        BeginArray();
        for (const nlohmann::json& element : value.get_ref<const nlohmann::json::array_t&>()) {
          Json(element);
        }
        return EndArray();
      case Type::string: return String(value.get_ref<const std::string&>());
      case Type::boolean: return Bool(value.get<bool>());
      case Type::number_integer: return Int(value.get<int64_t>());
      case Type::number_unsigned: return Unsigned(value.get<uint64_t>());
      case Type::number_float: return Double(value.get<double>());
      default: return Null();  // null, and the binary and discarded kinds JSON text has not
    }
  }
  JsonWriter& Unsigned(uint64_t value) {
    BeforeValue();
    char digits[24];
    const auto end = std::to_chars(digits, digits + sizeof digits, value).ptr;
    out_.append(digits, static_cast<size_t>(end - digits));
    return AfterValue();
  }

  std::string Take() { return std::move(out_); }

 private:
  JsonWriter& Open(char bracket) {
    BeforeValue();
    out_ += bracket;
    need_comma_ = false;
    return *this;
  }
  JsonWriter& Close(char bracket) {
    out_ += bracket;
    return AfterValue();
  }
  void BeforeValue() {
    if (after_key_) {
      after_key_ = false;
    } else if (need_comma_) {
      out_ += ',';
    }
  }
  JsonWriter& AfterValue() {
    need_comma_ = true;
    return *this;
  }

  // Runs of plain bytes are appended whole; only quotes, backslashes and control bytes are
  // escaped one by one.
  void AppendString(std::string_view value) {
    const size_t mark = out_.size();
    out_ += '"';
    unsigned char seen = 0;
    size_t run = 0;
    for (size_t i = 0; i < value.size(); ++i) {
      const auto byte = static_cast<unsigned char>(value[i]);
      seen |= byte;
      if (byte >= 0x20 && byte != '"' && byte != '\\') continue;
      out_.append(value.data() + run, i - run);
      run = i + 1;
      if (byte >= 0x20) {
        out_ += '\\';
        out_ += static_cast<char>(byte);
      } else {
        static constexpr char kHex[] = "0123456789abcdef";
        out_.append("\\u00", 4);
        out_ += kHex[byte >> 4];
        out_ += kHex[byte & 0xf];
      }
    }
    out_.append(value.data() + run, value.size() - run);
    out_ += '"';
    if ((seen & 0x80) && !IsValidUtf8(value)) {
      out_.resize(mark);  // the rare string with bytes no sanitizer reached
      out_ += JsonText(nlohmann::json(std::string(value)));
    }
  }

  std::string out_;
  bool need_comma_ = false;
  bool after_key_ = false;
};

// `value` as JSON text, as JsonText() writes it (U+FFFD for bytes that are not UTF-8), faster.
inline std::string WriteJson(const nlohmann::json& value) { return JsonWriter().Json(value).Take(); }

}  // namespace kvgate

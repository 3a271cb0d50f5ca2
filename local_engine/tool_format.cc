#include "local_engine/tool_format.h"

namespace kvgate::engine {
namespace {

using ordered_json = nlohmann::ordered_json;

std::string Dump(const ordered_json& v) {
  return v.dump(-1, ' ', false, ordered_json::error_handler_t::replace);
}

void AppendUtf8(uint32_t cp, std::string& out) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    if (cp >= 0xD800 && cp <= 0xDFFF) cp = 0xFFFD;  // a lone surrogate (the grammar writes none)
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

}  // namespace

std::string ToolSystemPrompt(const std::vector<ToolFunction>& tools) {
  std::string out =
      "You can call functions. Each one is described by a JSON object with its name, what it "
      "does and the JSON Schema of its arguments:\n";
  for (const ToolFunction& t : tools) {
    ordered_json f = {{"name", t.name}};
    if (!t.description.empty()) f["description"] = t.description;
    f["parameters"] = t.parameters;
    out += Dump(f);
    out += '\n';
  }
  out +=
      "\nTo call functions, answer with only this JSON object, one entry per call:\n"
      "{\"tool_calls\":[{\"name\":\"<function name>\",\"arguments\":<its arguments as a JSON "
      "object>}]}\n"
      "To answer without calling a function, answer with only this JSON object:\n"
      "{\"response\":\"<your answer>\"}\n"
      "The results of your calls come back in messages from the tool role.";
  return out;
}

std::string RenderToolCalls(const std::vector<ToolCall>& calls) {
  std::string out = "{\"tool_calls\":[";
  for (size_t i = 0; i < calls.size(); ++i) {
    if (i > 0) out += ',';
    out += "{\"name\":";
    out += Dump(calls[i].name);
    out += ",\"arguments\":";
    const bool is_json = ordered_json::accept(calls[i].arguments);
    out += is_json ? calls[i].arguments : Dump(calls[i].arguments);
    out += '}';
  }
  out += "]}";
  return out;
}

std::string RenderToolResponse(std::string_view text) {
  return "{\"response\":" + Dump(std::string(text)) + "}";
}

void ToolOutputParser::Expect(std::string_view literal, State then) {
  state_ = State::kExpect;
  expect_.assign(literal);
  expect_pos_ = 0;
  then_ = then;
}

void ToolOutputParser::Emit(Event::Kind kind, std::string_view text, std::vector<Event>& out) {
  const int index = kind == Event::Kind::kContent ? 0 : calls_ - 1;
  emitted_ = true;
  if (kind != Event::Kind::kCallStart && !out.empty() && out.back().kind == kind &&
      out.back().index == index) {
    out.back().text.append(text);
    return;
  }
  out.push_back({kind, index, std::string(text)});
}

void ToolOutputParser::Depart(char c, std::vector<Event>& out) {
  state_ = State::kRaw;
  if (!emitted_) {
    Emit(Event::Kind::kContent, seen_, out);  // seen_ ends with c
    return;
  }
  Emit(Event::Kind::kContent, std::string_view(&c, 1), out);
}

void ToolOutputParser::Push(std::string_view piece, std::vector<Event>& out) {
  for (char c : piece) Byte(c, out);
}

void ToolOutputParser::Byte(char c, std::vector<Event>& out) {
  if (!emitted_) seen_ += c;
  switch (state_) {
    case State::kExpect:
      if (c != expect_[expect_pos_]) return Depart(c, out);
      if (++expect_pos_ == expect_.size()) state_ = then_;
      return;
    case State::kKey:
      if (c != '"') {
        token_ += c;
        return;
      }
      if (token_ == "tool_calls") {
        Expect(":[{\"name\":\"", State::kName);
      } else if (token_ == "response") {
        Expect(":\"", State::kResponse);
      } else {
        return Depart(c, out);
      }
      token_.clear();
      return;
    case State::kName:
      if (c != '"') {
        token_ += c;
        return;
      }
      ++calls_;
      Emit(Event::Kind::kCallStart, token_, out);
      token_.clear();
      depth_ = 0;
      in_string_ = escaped_ = started_ = false;
      Expect(",\"arguments\":", State::kArgs);
      return;
    case State::kArgs:
      if (in_string_) {
        Emit(Event::Kind::kArguments, std::string_view(&c, 1), out);
        if (escaped_) {
          escaped_ = false;
        } else if (c == '\\') {
          escaped_ = true;
        } else if (c == '"') {
          in_string_ = false;
          if (depth_ == 0) Expect("}", State::kAfterCall);
        }
        return;
      }
      if (depth_ == 0 && started_ && c == '}') {  // a scalar's end: this closes the call
        state_ = State::kAfterCall;
        return;
      }
      Emit(Event::Kind::kArguments, std::string_view(&c, 1), out);
      started_ = true;
      if (c == '"') {
        in_string_ = true;
      } else if (c == '{' || c == '[') {
        ++depth_;
      } else if ((c == '}' || c == ']') && --depth_ == 0) {
        Expect("}", State::kAfterCall);
      }
      return;
    case State::kAfterCall:
      if (c == ',') return Expect("{\"name\":\"", State::kName);
      if (c == ']') return Expect("}", State::kDone);
      return Depart(c, out);
    case State::kResponse:
      if (c == '"') return Expect("}", State::kDone);
      if (c == '\\') {
        state_ = State::kEscape;
        return;
      }
      return Emit(Event::Kind::kContent, std::string_view(&c, 1), out);
    case State::kEscape: {
      state_ = State::kResponse;
      char plain = 0;
      switch (c) {
        case '"': case '\\': case '/': plain = c; break;
        case 'b': plain = '\b'; break;
        case 'f': plain = '\f'; break;
        case 'n': plain = '\n'; break;
        case 'r': plain = '\r'; break;
        case 't': plain = '\t'; break;
        case 'u':
          state_ = State::kHex;
          hex_ = 0;
          hex_digits_ = 0;
          return;
        default: return Depart(c, out);
      }
      return Emit(Event::Kind::kContent, std::string_view(&plain, 1), out);
    }
    case State::kHex: {
      const int d = c >= '0' && c <= '9'   ? c - '0'
                    : c >= 'a' && c <= 'f' ? c - 'a' + 10
                    : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                           : -1;
      if (d < 0) return Depart(c, out);
      hex_ = hex_ * 16 + static_cast<uint32_t>(d);
      if (++hex_digits_ < 4) return;
      std::string utf8;
      AppendUtf8(hex_, utf8);
      state_ = State::kResponse;
      return Emit(Event::Kind::kContent, utf8, out);
    }
    case State::kDone: return;  // nothing follows under the grammar
    case State::kRaw: return Emit(Event::Kind::kContent, std::string_view(&c, 1), out);
  }
}

}  // namespace kvgate::engine

// Edits of a JSON object's members that keep every other byte of it: what the pass-through paths
// use where they must change a value or two without re-encoding the client's body (key order,
// whitespace and escapes are what a provider's prompt cache may see).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "common/raw_json.h"

namespace kvgate::providers::internal {

// What SpliceMembers does with one member: keep its bytes, drop it (with one separator), or
// replace its value's bytes with `value` (JSON text).
struct MemberEdit {
  enum class Kind { kKeep, kDrop, kReplaceValue } kind = Kind::kKeep;
  std::string value;
};

// `object`'s exact bytes with the edits `edit(member)` asks for. Every byte outside the edited
// members is the input's own: whitespace, key order, escapes. A dropped member takes the
// separator before it (or, first, the one after it) with it, so the result stays valid JSON.
template <class EditFn>
std::string SpliceMembers(raw_json::Value object, EditFn&& edit) {
  const std::string_view text = object.text;
  const std::vector<raw_json::Member> members = raw_json::Members(object);
  auto at = [&](const char* p) { return static_cast<size_t>(p - text.data()); };
  auto key_start = [&](const raw_json::Member& m) { return at(m.key.data()) - 1; };  // its quote
  auto value_end = [&](const raw_json::Member& m) {
    return at(m.value.text.data()) + m.value.text.size();
  };
  std::string out;
  out.reserve(text.size() + 64);
  out += '{';
  if (members.empty()) return std::string(text);
  bool kept_any = false;
  for (size_t i = 0; i < members.size(); ++i) {
    const raw_json::Member& m = members[i];
    const MemberEdit e = edit(m);
    if (e.kind == MemberEdit::Kind::kDrop) continue;
    // What goes before a kept member: the first one kept gets the whitespace that followed '{';
    // a later one the separator (one comma) right before it in the input.
    const size_t lead = kept_any ? value_end(members[i - 1]) : 1;
    const size_t lead_end = kept_any ? key_start(m) : key_start(members[0]);
    out.append(text.substr(lead, lead_end - lead));
    if (e.kind == MemberEdit::Kind::kReplaceValue) {
      out.append(text.substr(key_start(m), at(m.value.text.data()) - key_start(m)));
      out += e.value;
    } else {
      out.append(text.substr(key_start(m), value_end(m) - key_start(m)));
    }
    kept_any = true;
  }
  const size_t tail_from = value_end(members.back());  // whitespace and '}'
  out.append(text.substr(tail_from));
  return out;
}

}  // namespace kvgate::providers::internal

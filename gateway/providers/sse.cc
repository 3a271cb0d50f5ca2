#include "gateway/providers/sse.h"

#include <string>

#include "common/find_bytes.h"

namespace kvgate::providers {
namespace {

constexpr std::string_view kBom = "\xEF\xBB\xBF";

}  // namespace

void SseParser::Append(std::string_view bytes) {
  // Compaction: drop bytes of events already returned. Only the current (incomplete) event
  // remains, so this moves little, once per Append rather than once per event.
  if (event_start_ > 0) {
    buffer_.erase(0, event_start_);
    scan_ -= event_start_;
    event_start_ = 0;
  }
  buffer_.append(bytes);
}

void SseParser::EndOfInput() { end_of_input_ = true; }

void SseParser::ResetEvent() {
  has_lines_ = false;
  has_event_name_ = false;
  event_name_offset_ = 0;
  event_name_size_ = 0;
  data_lines_ = 0;
  data_offset_ = 0;
  data_size_ = 0;
  data_joined_.clear();
}

namespace {

// The first '\r' or '\n' at or after `from`, or npos. (string_view::find_first_of called memchr
// once per byte of the buffer with the two-byte set: ~200 calls per event.)
size_t FindLineEnd(std::string_view buf, size_t from) {
  const char* end = buf.data() + buf.size();
  const char* hit = FindEitherByte(buf.data() + from, end, '\n', '\r');
  return hit == end ? std::string_view::npos : static_cast<size_t>(hit - buf.data());
}

}  // namespace

Result<std::optional<SseEvent>> SseParser::Next() {
  if (error_.has_value()) return std::unexpected(*error_);
  if (pending_reset_) {
    ResetEvent();
    pending_reset_ = false;
  }
  const std::string_view buf(buffer_);
  // The limit holds for an event's bytes before its blank line however the stream was cut into
  // pieces: checked when an event completes as well as while one is incomplete (an event that
  // arrived whole in one piece must fail as it would have arriving byte by byte).
  auto too_long = [&]() -> Result<std::optional<SseEvent>> {
    error_ = Error{ErrorCode::kResourceExhausted, "SSE event exceeds " +
                                                      std::to_string(max_event_bytes_) +
                                                      " bytes without its terminating blank line"};
    return std::unexpected(*error_);
  };

  if (at_stream_start_) {
    const size_t avail = buf.size() - scan_;
    if (avail < kBom.size() && !end_of_input_ && kBom.starts_with(buf.substr(scan_))) {
      return std::nullopt;  // could still become a BOM
    }
    if (buf.substr(scan_).starts_with(kBom)) {
      scan_ += kBom.size();
      event_start_ = scan_;
    }
    at_stream_start_ = false;
  }

  while (true) {
    size_t line_end = FindLineEnd(buf, scan_);
    size_t next = 0;
    if (line_end == std::string_view::npos) {
      if (end_of_input_ && scan_ < buf.size()) {
        line_end = buf.size();
        next = buf.size();
      } else if (end_of_input_ && has_lines_) {
        line_end = scan_;  // an implicit blank line ends the trailing event
        next = scan_;
      } else {
        break;  // need more bytes
      }
    } else if (buf[line_end] == '\r') {
      if (line_end + 1 < buf.size()) {
        next = line_end + (buf[line_end + 1] == '\n' ? 2 : 1);
      } else if (end_of_input_) {
        next = line_end + 1;
      } else {
        break;  // "\r" may be the first half of "\r\n"
      }
    } else {
      next = line_end + 1;
    }

    const std::string_view line = buf.substr(scan_, line_end - scan_);
    const size_t line_start = scan_;
    scan_ = next;

    if (line.empty()) {
      if (!has_lines_) {
        event_start_ = scan_;  // a blank line that ends no event
        continue;
      }
      if (line_start - event_start_ > max_event_bytes_) return too_long();
      SseEvent event;
      event.raw = buf.substr(event_start_, scan_ - event_start_);
      if (has_event_name_)
        event.event = buf.substr(event_start_ + event_name_offset_, event_name_size_);
      event.has_data = data_lines_ > 0;
      if (data_lines_ == 1) {
        event.data = buf.substr(event_start_ + data_offset_, data_size_);
      } else if (data_lines_ > 1) {
        event.data = data_joined_;
      }
      event_start_ = scan_;
      pending_reset_ = true;
      return event;
    }

    has_lines_ = true;
    if (line.front() == ':') continue;  // comment
    const size_t colon = line.find(':');
    const std::string_view field = line.substr(0, colon);
    std::string_view value;
    size_t value_start = line_start + line.size();
    if (colon != std::string_view::npos) {
      value_start = line_start + colon + 1;
      value = line.substr(colon + 1);
      if (!value.empty() && value.front() == ' ') {
        value.remove_prefix(1);
        ++value_start;
      }
    }
    if (field == "data") {
      if (data_lines_ == 0) {
        data_offset_ = value_start - event_start_;
        data_size_ = value.size();
      } else {
        if (data_lines_ == 1)
          data_joined_.assign(buf.substr(event_start_ + data_offset_, data_size_));
        data_joined_.push_back('\n');
        data_joined_.append(value);
      }
      ++data_lines_;
    } else if (field == "event") {
      has_event_name_ = true;
      event_name_offset_ = value_start - event_start_;
      event_name_size_ = value.size();
    }
  }

  // Bytes of the incomplete event so far, before its blank line: a pending "\r" alone at scan_
  // may be that blank line (or its first half) and does not count.
  const std::string_view rest = buf.substr(scan_);
  const size_t so_far = (rest.empty() || rest == "\r") ? scan_ - event_start_
                                                       : buf.size() - event_start_;
  if (so_far > max_event_bytes_) return too_long();
  return std::nullopt;
}

}  // namespace kvgate::providers

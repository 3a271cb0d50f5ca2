#include "gateway/providers/sse.h"

#include <string>

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

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

// The first '\r' or '\n' at or after `from`, or npos: sixteen bytes at a time, since a stream's
// bytes pass through here once each. (string_view::find_first_of called memchr once per byte of
// the buffer with the two-byte set: ~200 calls per event.)
size_t FindLineEnd(std::string_view buf, size_t from) {
  size_t i = from;
#if defined(__SSE2__)
  const __m128i lf = _mm_set1_epi8('\n');
  const __m128i cr = _mm_set1_epi8('\r');
  for (; i + 16 <= buf.size(); i += 16) {
    const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(buf.data() + i));
    const int mask =
        _mm_movemask_epi8(_mm_or_si128(_mm_cmpeq_epi8(bytes, lf), _mm_cmpeq_epi8(bytes, cr)));
    if (mask != 0) return i + static_cast<size_t>(__builtin_ctz(static_cast<unsigned>(mask)));
  }
#endif
  for (; i < buf.size(); ++i) {
    if (buf[i] == '\n' || buf[i] == '\r') return i;
  }
  return std::string_view::npos;
}

}  // namespace

Result<std::optional<SseEvent>> SseParser::Next() {
  if (error_.has_value()) return std::unexpected(*error_);
  if (pending_reset_) {
    ResetEvent();
    pending_reset_ = false;
  }
  const std::string_view buf(buffer_);

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

  if (buffer_.size() - event_start_ > max_event_bytes_) {
    error_ = Error{ErrorCode::kResourceExhausted, "SSE event exceeds " +
                                                      std::to_string(max_event_bytes_) +
                                                      " bytes without its terminating blank line"};
    return std::unexpected(*error_);
  }
  return std::nullopt;
}

}  // namespace kvgate::providers

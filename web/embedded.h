// The dashboard's files as the build compiled them into the binary (web/CMakeLists.txt generates
// the definition from web/*.html, *.css, *.js and Debian's Chart.js). Data only: how they are
// served is gateway/web_assets.h.
#pragma once

#include <span>
#include <string_view>

namespace kvgate::web {

struct EmbeddedFile {
  std::string_view name;  // the file name, e.g. "app.js" or "chart.min.js"
  std::string_view data;  // its bytes
  std::string_view etag;  // a strong ETag, quoted: the first 16 hex digits of its SHA-256
};

// Every embedded file, sorted by name. Static storage: valid for the life of the process.
std::span<const EmbeddedFile> EmbeddedFiles();

}  // namespace kvgate::web

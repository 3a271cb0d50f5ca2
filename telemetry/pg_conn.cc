#include "telemetry/pg_conn.h"

#include "telemetry/store.h"

#include <libpq-fe.h>

#include <charconv>
#include <cstdlib>
#include <regex>

namespace kvgate::telemetry {
namespace internal {
namespace {

// Type OIDs (pg_type.dat): fixed since PostgreSQL 7.
constexpr unsigned kInt8Oid = 20;
constexpr unsigned kTextOid = 25;
constexpr unsigned kFloat8Oid = 701;

// libpq's messages end in a newline and may span lines ("server closed the connection
// unexpectedly\n\tThis probably means..."): one line, for logs and /healthz.
std::string Trimmed(const char* message) {
  std::string text;
  bool space = false;
  for (const char* c = message == nullptr ? "" : message; *c != '\0'; ++c) {
    if (*c == '\n' || *c == '\t' || *c == ' ') {
      space = !text.empty();
      continue;
    }
    if (space) text.push_back(' ');
    space = false;
    text.push_back(*c);
  }
  return text;
}

}  // namespace

void PgParams::Int(int64_t value) {
  values_.push_back(std::to_string(value));
  nulls_.push_back(false);
  types_.push_back(kInt8Oid);
}

void PgParams::OptInt(std::optional<int64_t> value) {
  values_.push_back(value ? std::to_string(*value) : std::string());
  nulls_.push_back(!value.has_value());
  types_.push_back(kInt8Oid);
}

void PgParams::Text(std::string_view value) {
  std::string text;
  if (value.find('\0') == std::string_view::npos) {
    text.assign(value);
  } else {
    text.reserve(value.size() + 8);
    for (char c : value) {
      if (c == '\0') {
        text += "\xEF\xBF\xBD";
      } else {
        text.push_back(c);
      }
    }
  }
  values_.push_back(std::move(text));
  nulls_.push_back(false);
  types_.push_back(kTextOid);
}

void PgParams::TextOrNull(std::string_view value) {
  if (!value.empty()) return Text(value);
  values_.emplace_back();
  nulls_.push_back(true);
  types_.push_back(kTextOid);
}

void PgParams::Double(double value) {
  char buf[32];
  const auto [end, ec] = std::to_chars(buf, buf + sizeof(buf), value);  // shortest round trip
  values_.emplace_back(buf, ec == std::errc() ? end : buf);
  nulls_.push_back(false);
  types_.push_back(kFloat8Oid);
}

PgResult& PgResult::operator=(PgResult&& other) noexcept {
  if (this != &other) {
    if (result_ != nullptr) PQclear(result_);
    result_ = other.result_;
    other.result_ = nullptr;
  }
  return *this;
}

PgResult::~PgResult() {
  if (result_ != nullptr) PQclear(result_);
}

int PgResult::rows() const { return result_ == nullptr ? 0 : PQntuples(result_); }

int PgResult::columns() const { return result_ == nullptr ? 0 : PQnfields(result_); }

bool PgResult::IsNull(int row, int column) const { return PQgetisnull(result_, row, column) != 0; }

std::string_view PgResult::Text(int row, int column) const {
  if (IsNull(row, column)) return {};
  return {PQgetvalue(result_, row, column),
          static_cast<size_t>(PQgetlength(result_, row, column))};
}

int64_t PgResult::Int(int row, int column) const {
  const std::string_view text = Text(row, column);
  int64_t value = 0;
  std::from_chars(text.data(), text.data() + text.size(), value);
  return value;
}

double PgResult::Real(int row, int column) const {
  const std::string_view text = Text(row, column);
  if (text.empty()) return 0;
  // strtod reads "Infinity" / "NaN" as PostgreSQL writes them; the text is NUL-terminated.
  return std::strtod(PQgetvalue(result_, row, column), nullptr);
}

Result<std::unique_ptr<PgConnection>> PgConnection::Connect(const std::string& conninfo) {
  char* parse_error = nullptr;
  PQconninfoOption* parsed = PQconninfoParse(conninfo.c_str(), &parse_error);
  if (parsed == nullptr) {
    std::string message = Trimmed(parse_error);
    PQfreemem(parse_error);
    return MakeError(ErrorCode::kInvalidArgument,
                     "bad PostgreSQL connection string: " + message);
  }
  PQconninfoFree(parsed);
  // Defaults first: the expanded conninfo ("dbname" below) overrides them where it sets them.
  const char* keywords[] = {"connect_timeout", "application_name", "dbname", nullptr};
  const char* values[] = {"5", "kvgate", conninfo.c_str(), nullptr};
  PGconn* conn = PQconnectdbParams(keywords, values, /*expand_dbname=*/1);
  if (conn == nullptr) return MakeError(ErrorCode::kUnavailable, "libpq: out of memory");
  std::unique_ptr<PgConnection> connection(new PgConnection(conn));
  if (PQstatus(conn) != CONNECTION_OK) {
    return MakeError(ErrorCode::kUnavailable,
                     "cannot connect to PostgreSQL at " + RedactConninfo(conninfo) + ": " +
                         Trimmed(PQerrorMessage(conn)));
  }
  // Notices ("relation already exists, skipping") are not errors, and stderr is the operator's.
  PQsetNoticeProcessor(conn, [](void*, const char*) {}, nullptr);
  return connection;
}

PgConnection::~PgConnection() { PQfinish(conn_); }

bool PgConnection::Broken() const { return PQstatus(conn_) != CONNECTION_OK; }

Error PgConnection::ErrorOf(pg_result* result, std::string_view what) const {
  std::string message = result != nullptr ? Trimmed(PQresultErrorMessage(result)) : "";
  if (message.empty()) message = Trimmed(PQerrorMessage(conn_));
  const char* state = result != nullptr ? PQresultErrorField(result, PG_DIAG_SQLSTATE) : nullptr;
  if (state != nullptr) message += std::string(" (SQLSTATE ") + state + ")";
  return Error{ErrorCode::kUnavailable, "PostgreSQL " + std::string(what) + ": " + message};
}

Status PgConnection::Exec(std::string_view sql) {
  const std::string text(sql);
  // PQexec returns the last statement's result; a failure stops the string there.
  PGresult* raw = PQexec(conn_, text.c_str());
  PgResult owned(raw);
  const ExecStatusType status = PQresultStatus(raw);
  if (status == PGRES_COMMAND_OK || status == PGRES_TUPLES_OK || status == PGRES_EMPTY_QUERY) {
    return {};
  }
  return std::unexpected(ErrorOf(raw, "statement failed"));
}

Result<PgResult> PgConnection::Query(std::string_view sql, const PgParams& params) {
  const std::string text(sql);
  const size_t n = params.values_.size();
  std::vector<const char*> values(n);
  for (size_t i = 0; i < n; ++i) {
    values[i] = params.nulls_[i] ? nullptr : params.values_[i].c_str();
  }
  std::vector<unsigned> types(params.types_);
  PGresult* raw = PQexecParams(conn_, text.c_str(), static_cast<int>(n), types.data(),
                               values.data(), /*paramLengths=*/nullptr, /*paramFormats=*/nullptr,
                               /*resultFormat=*/0);
  PgResult result(raw);
  const ExecStatusType status = PQresultStatus(raw);
  if (status != PGRES_COMMAND_OK && status != PGRES_TUPLES_OK) {
    return std::unexpected(ErrorOf(raw, "query failed"));
  }
  return result;
}

}  // namespace internal

std::string RedactConninfo(std::string_view conninfo) {
  // postgresql://user:secret@host/db -> postgresql://user:***@host/db; password=secret -> ***.
  static const std::regex kUriPassword(R"(^(postgres(?:ql)?://[^:/@]*):[^@/]*@)");
  static const std::regex kKeyPassword(R"((password\s*=\s*)('[^']*'|\S+))");
  std::string text = std::regex_replace(std::string(conninfo), kUriPassword, "$1:***@");
  return std::regex_replace(text, kKeyPassword, "$1***");
}

}  // namespace kvgate::telemetry

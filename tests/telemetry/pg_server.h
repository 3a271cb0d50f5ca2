// A real PostgreSQL server for the store tests: Debian's `postgresql` binaries (initdb, pg_ctl)
// run in a temporary directory on a free loopback port, so that no service has to be set up.
// PostgreSQL refuses to run as root: under root the server runs as `nobody` (runuser).
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "common/error.h"

namespace kvgate::telemetry::testing {

class PgServer {
 public:
  // initdb + pg_ctl start. Errors name what is missing or what the server said.
  static Result<std::unique_ptr<PgServer>> Start() {
    std::unique_ptr<PgServer> server(new PgServer());
    if (Status s = server->Init(); !s) return std::unexpected(s.error());
    // The free port may be taken between the check and the start (tests run in parallel).
    Status started;
    for (int attempt = 0; attempt < 3; ++attempt) {
      server->port_ = FreePort();
      started = server->Run();
      if (started) return server;
    }
    return std::unexpected(started.error());
  }
  ~PgServer() {
    (void)Stop();
    std::error_code ec;
    std::filesystem::remove_all(dir_, ec);
  }

  // A new, empty database on this server; its libpq URI.
  Result<std::string> NewDatabase() {
    const std::string name = "kvgate_test_" + std::to_string(++databases_);
    if (Status s = Shell(Bin("psql") + " -q -h 127.0.0.1 -p " + std::to_string(port_) +
                         " -U kvgate -d postgres -c 'CREATE DATABASE " + name + "'");
        !s) {
      return std::unexpected(s.error());
    }
    return Uri(name);
  }
  // Runs SQL (no single quotes in it) on a database of this server as its superuser.
  Status Psql(const std::string& database, const std::string& sql) {
    return Shell(Bin("psql") + " -q -v ON_ERROR_STOP=1 -h 127.0.0.1 -p " + std::to_string(port_) +
                 " -U kvgate -d " + database + " -c '" + sql + "'");
  }
  std::string Uri(const std::string& database) const {
    return "postgresql://kvgate@127.0.0.1:" + std::to_string(port_) + "/" + database;
  }

  // Stops the server (fast shutdown: open connections are cut, as by a restart).
  Status Stop() {
    if (!running_) return {};
    running_ = false;
    return Shell(Bin("pg_ctl") + " -D " + Data() + " -m fast -w stop");
  }
  // Starts it again on the same port.
  Status Run() {
    Status s = Shell(Bin("pg_ctl") + " -D " + Data() + " -l " + dir_.string() +
                     "/server.log -w -t 60 -o '-p " + std::to_string(port_) +
                     " -c listen_addresses=127.0.0.1 -c unix_socket_directories=" +
                     dir_.string() + " -c fsync=off' start");
    if (s) running_ = true;
    return s;
  }
  int port() const { return port_; }

 private:
  PgServer() = default;

  Status Init() {
    bin_ = FindBinDir();
    if (bin_.empty()) {
      return MakeError(ErrorCode::kUnavailable,
                       "PostgreSQL's server binaries were not found (/usr/lib/postgresql/*/bin "
                       "or $KVGATE_PG_BINDIR): apt-get install postgresql");
    }
    std::string tmpl = (std::filesystem::temp_directory_path() / "kvgate_pg_XXXXXX").string();
    if (::mkdtemp(tmpl.data()) == nullptr) {
      return MakeError(ErrorCode::kUnavailable, "mkdtemp failed");
    }
    dir_ = tmpl;
    as_nobody_ = ::geteuid() == 0;
    if (as_nobody_ && !Shell("chown nobody " + dir_.string(), /*as_server=*/false)) {
      return MakeError(ErrorCode::kUnavailable, "cannot give " + dir_.string() + " to nobody");
    }
    return Shell(Bin("initdb") + " -D " + Data() +
                 " -U kvgate --auth=trust --encoding=UTF8 --locale=C.UTF-8 -N");
  }

  std::string Data() const { return dir_.string() + "/data"; }
  std::string Bin(const std::string& name) const { return bin_ + "/" + name; }

  // Runs a command (as the server's user), its output to a log; the log's tail on failure.
  Status Shell(const std::string& command, bool as_server = true) {
    const std::string log = dir_.string() + "/cmd.log";
    const std::string full = (as_server && as_nobody_ ? "runuser -u nobody -- " : "") + command +
                             " > " + log + " 2>&1";
    if (std::system(full.c_str()) == 0) return {};
    std::ifstream in(log);
    std::stringstream text;
    text << in.rdbuf();
    return MakeError(ErrorCode::kUnavailable, "`" + command + "` failed: " + text.str());
  }

  static std::string FindBinDir() {
    if (const char* env = std::getenv("KVGATE_PG_BINDIR"); env != nullptr && *env != '\0') {
      return env;
    }
    std::vector<std::string> found;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator("/usr/lib/postgresql", ec)) {
      if (std::filesystem::exists(e.path() / "bin" / "initdb")) {
        found.push_back((e.path() / "bin").string());
      }
    }
    std::sort(found.begin(), found.end());
    return found.empty() ? "" : found.back();
  }

  // A loopback port nothing listens on now (bound to port 0 and released).
  static int FreePort() {
    const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    int port = 0;
    if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
        ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port = ntohs(addr.sin_port);
    }
    ::close(fd);
    return port;
  }

  std::filesystem::path dir_;
  std::string bin_;
  bool as_nobody_ = false;
  bool running_ = false;
  int port_ = 0;
  int databases_ = 0;
};

}  // namespace kvgate::telemetry::testing

// Shared helpers for the alert tests: temp dirs, an independent Standard Webhooks verifier, and a
// real SMTP server process (aiosmtpd from the project's venv).
#pragma once

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "common/ids.h"

namespace kvgate::testing {

class TempDir {
 public:
  TempDir() : path_(std::filesystem::temp_directory_path() / NewId("kvgate_alerts")) {
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::filesystem::path& path() const { return path_; }
  std::string File(const std::string& name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

// The receiver side of Standard Webhooks, written against OpenSSL directly (not the sender's
// code): HMAC-SHA256 over "id.timestamp.body" with the base64-decoded secret, constant-time
// compare, 5-minute timestamp tolerance against the receiver's own clock.
inline bool ReceiverVerifies(const std::string& secret, const std::map<std::string, std::string>& h,
                             const std::string& body, int64_t now_seconds) {
  auto get = [&](const char* name) -> std::string {
    auto it = h.find(name);
    return it == h.end() ? std::string() : it->second;
  };
  const std::string id = get("webhook-id"), ts = get("webhook-timestamp"),
                    sig = get("webhook-signature");
  if (id.empty() || ts.empty() || sig.empty() || secret.rfind("whsec_", 0) != 0) return false;
  const long long t = std::atoll(ts.c_str());
  if (t < now_seconds - 300 || t > now_seconds + 300) return false;
  const std::string b64 = secret.substr(6);
  std::vector<unsigned char> key(b64.size());
  int key_len = EVP_DecodeBlock(key.data(), reinterpret_cast<const unsigned char*>(b64.data()),
                                int(b64.size()));
  if (key_len < 0) return false;
  if (!b64.empty() && b64.back() == '=') --key_len;
  if (b64.size() > 1 && b64[b64.size() - 2] == '=') --key_len;
  const std::string content = id + "." + ts + "." + body;
  unsigned char mac[32];
  unsigned int mac_len = 0;
  HMAC(EVP_sha256(), key.data(), key_len, reinterpret_cast<const unsigned char*>(content.data()),
       content.size(), mac, &mac_len);
  unsigned char expected[64] = {0};
  const int expected_len = EVP_EncodeBlock(expected, mac, int(mac_len));
  const std::string want = "v1," + std::string(reinterpret_cast<char*>(expected), expected_len);
  bool ok = false;
  size_t start = 0;
  while (start <= sig.size()) {
    size_t end = sig.find(' ', start);
    if (end == std::string::npos) end = sig.size();
    const std::string candidate = sig.substr(start, end - start);
    if (candidate.size() == want.size() &&
        CRYPTO_memcmp(candidate.data(), want.data(), want.size()) == 0) {
      ok = true;
    }
    start = end + 1;
  }
  return ok;
}

inline int FreeLocalPort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  ::close(fd);
  return ntohs(addr.sin_port);
}

// aiosmtpd (tests/alerts/smtp_receiver.py) in the venv, with a fresh self-signed certificate.
class SmtpServer {
 public:
  // tls: "starttls" | "implicit" | "none".
  SmtpServer(const TempDir& dir, const std::string& tls, std::string user, std::string password)
      : dir_(dir), user_(std::move(user)), password_(std::move(password)) {
    const std::string python = std::string(KVGATE_SOURCE_DIR) + "/.venv/bin/python";
    if (std::system((python + " -c 'import aiosmtpd' >/dev/null 2>&1").c_str()) != 0) {
      error_ = "aiosmtpd is not importable from " + python +
               " (run scripts/setup.sh: scripts/requirements-test.txt lists it)";
      return;
    }
    cert_ = dir.File("cert.pem");
    const std::string key = dir.File("key.pem");
    const std::string gen =
        "openssl req -x509 -newkey rsa:2048 -nodes -days 1 -subj /CN=127.0.0.1"
        " -addext subjectAltName=IP:127.0.0.1 -keyout '" +
        key + "' -out '" + cert_ + "' >/dev/null 2>&1";
    if (std::system(gen.c_str()) != 0) {
      error_ = "openssl could not create a test certificate";
      return;
    }
    out_dir_ = dir.File("mail");
    std::filesystem::create_directories(out_dir_);
    const std::string ready = dir.File("smtp.ready");
    port_ = FreeLocalPort();
    pid_ = ::fork();
    if (pid_ == 0) {
      const std::string script = std::string(KVGATE_SOURCE_DIR) + "/tests/alerts/smtp_receiver.py";
      const std::string port = std::to_string(port_);
      ::execl(python.c_str(), python.c_str(), script.c_str(), "--port", port.c_str(), "--tls",
              tls.c_str(), "--cert", cert_.c_str(), "--key", key.c_str(), "--user", user_.c_str(),
              "--password", password_.c_str(), "--out-dir", out_dir_.c_str(), "--ready-file",
              ready.c_str(), static_cast<char*>(nullptr));
      ::_exit(127);
    }
    for (int i = 0; i < 200 && !std::filesystem::exists(ready); ++i) {
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (!std::filesystem::exists(ready)) error_ = "the SMTP server did not start within 10 s";
  }
  ~SmtpServer() {
    if (pid_ > 0) {
      ::kill(pid_, SIGTERM);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  const std::string& error() const { return error_; }
  int port() const { return port_; }
  const std::string& cert() const { return cert_; }
  // Received mails, in order.
  std::vector<nlohmann::json> Mails() const {
    std::vector<nlohmann::json> out;
    for (int i = 1;; ++i) {
      std::ifstream in(out_dir_ + "/" + std::to_string(i) + ".json");
      if (!in) break;
      out.push_back(nlohmann::json::parse(in, nullptr, false));
    }
    return out;
  }

 private:
  const TempDir& dir_;
  std::string user_, password_, cert_, out_dir_, error_;
  int port_ = 0;
  pid_t pid_ = -1;
};

}  // namespace kvgate::testing

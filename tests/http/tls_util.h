// A self-signed certificate made with the OpenSSL C API, and a blocking TLS test server.
#pragma once

#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/ssl.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/http/test_util.h"

namespace kvgate::testing {

// A key and a self-signed (CA:TRUE) certificate for the given subjectAltName list, e.g.
// "DNS:localhost,IP:127.0.0.1". The certificate is also written as PEM to cert_path.
class SelfSignedCert {
 public:
  SelfSignedCert(const std::string& san, const std::string& cert_path) : path_(cert_path) {
    key_ = EVP_EC_gen("P-256");
    cert_ = X509_new();
    X509_set_version(cert_, 2);
    ASN1_INTEGER_set(X509_get_serialNumber(cert_), std::rand() + 1);
    X509_gmtime_adj(X509_getm_notBefore(cert_), -3600);
    X509_gmtime_adj(X509_getm_notAfter(cert_), 24 * 3600);
    X509_set_pubkey(cert_, key_);
    X509_NAME* name = X509_get_subject_name(cert_);
    X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                               reinterpret_cast<const unsigned char*>("kvgate test"), -1, -1, 0);
    X509_set_issuer_name(cert_, name);
    X509V3_CTX ctx;
    X509V3_set_ctx_nodb(&ctx);
    X509V3_set_ctx(&ctx, cert_, cert_, nullptr, nullptr, 0);
    for (auto [nid, value] : {std::pair{NID_subject_alt_name, san},
                              std::pair{NID_basic_constraints, std::string("critical,CA:TRUE")}}) {
      X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value.c_str());
      X509_add_ext(cert_, ext, -1);
      X509_EXTENSION_free(ext);
    }
    X509_sign(cert_, key_, EVP_sha256());
    BIO* out = BIO_new_file(cert_path.c_str(), "w");
    PEM_write_bio_X509(out, cert_);
    BIO_free(out);
  }
  ~SelfSignedCert() {
    X509_free(cert_);
    EVP_PKEY_free(key_);
    std::remove(path_.c_str());
  }
  SelfSignedCert(const SelfSignedCert&) = delete;
  SelfSignedCert& operator=(const SelfSignedCert&) = delete;

  X509* cert() const { return cert_; }
  EVP_PKEY* key() const { return key_; }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  EVP_PKEY* key_ = nullptr;
  X509* cert_ = nullptr;
};

// Answers every request on every connection with 200 and body "tls ok <n>", keep-alive.
class TlsServer {
 public:
  explicit TlsServer(const SelfSignedCert& cert)
      : ctx_(NewCtx(cert)),
        tcp_([this](int fd, int, const std::atomic<bool>& stop) { Serve(fd, stop); }) {}
  ~TlsServer() = default;

  uint16_t port() const { return tcp_.port(); }
  int handshakes_ok() const { return handshakes_ok_.load(); }

 private:
  static SSL_CTX* NewCtx(const SelfSignedCert& cert) {
    SSL_CTX* ctx = SSL_CTX_new(TLS_server_method());
    SSL_CTX_use_certificate(ctx, cert.cert());
    SSL_CTX_use_PrivateKey(ctx, cert.key());
    return ctx;
  }

  void Serve(int fd, const std::atomic<bool>& stop) {
    SSL* ssl = SSL_new(ctx_.get());
    SSL_set_fd(ssl, fd);
    if (SSL_accept(ssl) == 1) {
      ++handshakes_ok_;
      std::string carry;
      int served = 0;
      while (!stop) {
        while (carry.find("\r\n\r\n") == std::string::npos) {
          char buf[4096];
          const int n = SSL_read(ssl, buf, sizeof buf);
          if (n <= 0) goto done;
          carry.append(buf, static_cast<size_t>(n));
        }
        carry.erase(0, carry.find("\r\n\r\n") + 4);  // requests in these tests have no body
        const std::string body = "tls ok " + std::to_string(++served);
        const std::string response = "HTTP/1.1 200 OK\r\nContent-Length: " +
                                     std::to_string(body.size()) + "\r\n\r\n" + body;
        if (SSL_write(ssl, response.data(), static_cast<int>(response.size())) <= 0) break;
      }
    }
  done:
    SSL_free(ssl);
  }

  struct CtxFree {
    void operator()(SSL_CTX* c) const { SSL_CTX_free(c); }
  };
  std::unique_ptr<SSL_CTX, CtxFree> ctx_;
  std::atomic<int> handshakes_ok_{0};
  ScriptedServer tcp_;  // last: its threads stop before ctx_ goes
};

}  // namespace kvgate::testing

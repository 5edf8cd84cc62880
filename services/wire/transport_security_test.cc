// Certificate loading errors, the bearer token, and a TLS server refusing a
// plaintext client, with certificates made in-process by OpenSSL.
#include "services/wire/transport_security.h"

#include <gmock/gmock.h>
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <openssl/x509v3.h>
#include <stdlib.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "services/base/paths.h"
#include "services/wire/bearer_token.h"
#include "services/wire/grpc_defaults.h"
#include "services/wire/health_check.h"

namespace petra::wire {
namespace {

using ::testing::HasSubstr;

// A key and a certificate signed by `issuer` (self-signed when null), valid
// from now for `days` (negative: expired that many days ago).
struct Identity {
  std::string cert_pem, key_pem;
  EVP_PKEY* key = nullptr;
  X509* cert = nullptr;
  ~Identity() {
    X509_free(cert);
    EVP_PKEY_free(key);
  }
};

std::string ToPem(X509* cert) {
  BIO* bio = BIO_new(BIO_s_mem());
  PEM_write_bio_X509(bio, cert);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

std::string ToPem(EVP_PKEY* key, const EVP_CIPHER* cipher = nullptr) {
  BIO* bio = BIO_new(BIO_s_mem());
  char pass[] = "secret";
  PEM_write_bio_PrivateKey(
      bio, key, cipher,
      cipher ? reinterpret_cast<unsigned char*>(pass) : nullptr, cipher ? 6 : 0,
      nullptr, nullptr);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio, &data);
  std::string out(data, static_cast<size_t>(n));
  BIO_free(bio);
  return out;
}

std::unique_ptr<Identity> MakeIdentity(const std::string& cn,
                                       const Identity* issuer, long days,
                                       bool ca) {
  auto id = std::make_unique<Identity>();
  id->key = EVP_EC_gen("P-256");
  id->cert = X509_new();
  X509_set_version(id->cert, 2);
  ASN1_INTEGER_set(X509_get_serialNumber(id->cert), 1000 + days);
  const long seconds = days * 86400;
  X509_gmtime_adj(X509_getm_notBefore(id->cert),
                  seconds < 0 ? 2 * seconds : -60);
  X509_gmtime_adj(X509_getm_notAfter(id->cert), seconds);
  X509_NAME* name = X509_get_subject_name(id->cert);
  X509_NAME_add_entry_by_txt(name, "CN", MBSTRING_ASC,
                             reinterpret_cast<const unsigned char*>(cn.c_str()),
                             -1, -1, 0);
  X509* issuer_cert = issuer ? issuer->cert : id->cert;
  X509_set_issuer_name(id->cert, X509_get_subject_name(issuer_cert));
  X509_set_pubkey(id->cert, id->key);
  X509V3_CTX ctx;
  X509V3_set_ctx(&ctx, issuer_cert, id->cert, nullptr, nullptr, 0);
  auto add = [&](int nid, const char* value) {
    X509_EXTENSION* ext = X509V3_EXT_conf_nid(nullptr, &ctx, nid, value);
    X509_add_ext(id->cert, ext, -1);
    X509_EXTENSION_free(ext);
  };
  if (ca) {
    add(NID_basic_constraints, "critical,CA:TRUE");
    add(NID_key_usage, "critical,keyCertSign,cRLSign");
  } else {
    add(NID_basic_constraints, "CA:FALSE");
    add(NID_subject_alt_name, "IP:127.0.0.1,DNS:localhost");
  }
  X509_sign(id->cert, issuer ? issuer->key : id->key, EVP_sha256());
  id->cert_pem = ToPem(id->cert);
  id->key_pem = ToPem(id->key);
  return id;
}

class TransportSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/petra-tls-test-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
    ca_ = MakeIdentity("test-ca", nullptr, 30, true);
    server_ = MakeIdentity("server", ca_.get(), 30, false);
    Write("ca.crt", ca_->cert_pem);
    Write("server.crt", server_->cert_pem);
    Write("server.key", server_->key_pem);
  }
  void TearDown() override { petra::base::RemoveTree(dir_).IgnoreError(); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = dir_ + "/" + name;
    std::ofstream(path) << text;
    return path;
  }
  std::string Path(const std::string& name) { return dir_ + "/" + name; }

  absl::Status ServerError(const TlsOptions& o) {
    return LoadTransportSecurity(o, TlsRole::kServer).status();
  }

  std::string dir_;
  std::unique_ptr<Identity> ca_, server_;
};

TEST_F(TransportSecurityTest, NothingSetIsPlaintext) {
  absl::StatusOr<TransportSecurity> s =
      LoadTransportSecurity({}, TlsRole::kServer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->enabled());
  EXPECT_EQ(s->Describe(), "plaintext");
}

TEST_F(TransportSecurityTest, LoadsServerAndClientFiles) {
  absl::StatusOr<TransportSecurity> s = LoadTransportSecurity(
      {Path("server.crt"), Path("server.key"), Path("ca.crt")},
      TlsRole::kServer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->mutual());
  EXPECT_EQ(s->identity, "server");
  EXPECT_EQ(s->Describe(), "mutual TLS (identity server)");
  s = LoadTransportSecurity({Path("server.crt"), Path("server.key"), ""},
                            TlsRole::kServer);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_FALSE(s->mutual());
  // A client may verify the server without a certificate of its own.
  s = LoadTransportSecurity({"", "", Path("ca.crt")}, TlsRole::kClient);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_TRUE(s->enabled());
}

TEST_F(TransportSecurityTest, HalfSetIsRefusedNamingTheFlags) {
  absl::Status s = ServerError({Path("server.crt"), "", ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--tls-cert is set but --tls-key is not"));
  s = LoadTransportSecurity({"", Path("server.key"), Path("ca.crt")},
                            TlsRole::kClient)
          .status();
  EXPECT_THAT(s.message(), HasSubstr("--tls-key is set but --tls-cert is not"));
  // A server cannot verify client certificates without TLS of its own.
  s = ServerError({"", "", Path("ca.crt")});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("--tls-ca on a server"));
}

TEST_F(TransportSecurityTest, UnreadableOrWrongFilesAreRefused) {
  absl::Status s =
      ServerError({Path("missing.crt"), Path("server.key"), Path("ca.crt")});
  EXPECT_EQ(s.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(s.message(),
              HasSubstr("--tls-cert: cannot read " + Path("missing.crt")));
  s = ServerError({Path("server.crt"), Path("server.key"), Path("nope.crt")});
  EXPECT_THAT(s.message(), HasSubstr("--tls-ca: cannot read"));

  // A key given as the certificate, a certificate as the key.
  s = ServerError({Path("server.key"), Path("server.key"), ""});
  EXPECT_THAT(s.message(), HasSubstr("--tls-cert: \"" + Path("server.key") +
                                     "\" holds no PEM certificate"));
  s = ServerError({Path("server.crt"), Path("server.crt"), ""});
  EXPECT_THAT(s.message(), HasSubstr("--tls-key: \"" + Path("server.crt") +
                                     "\" holds no PEM private key"));
  s = ServerError(
      {Path("server.crt"), Path("server.key"), Write("junk.crt", "hello")});
  EXPECT_THAT(s.message(), HasSubstr("--tls-ca: \"" + Path("junk.crt") +
                                     "\" holds no PEM certificate"));
  // A directory is not a file.
  s = ServerError({dir_, Path("server.key"), ""});
  EXPECT_FALSE(s.ok());
  EXPECT_THAT(s.message(), HasSubstr("--tls-cert"));
}

TEST_F(TransportSecurityTest, KeyOfAnotherCertificateIsRefused) {
  std::unique_ptr<Identity> other = MakeIdentity("other", ca_.get(), 30, false);
  const std::string key = Write("other.key", other->key_pem);
  absl::Status s = ServerError({Path("server.crt"), key, ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(),
              HasSubstr("is not the private key of the certificate in"));
}

TEST_F(TransportSecurityTest, ExpiredCertificateIsRefused) {
  std::unique_ptr<Identity> old = MakeIdentity("old", ca_.get(), -2, false);
  absl::Status s = ServerError(
      {Write("old.crt", old->cert_pem), Write("old.key", old->key_pem), ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("expired on"));
}

TEST_F(TransportSecurityTest, EncryptedKeyIsRefusedWithoutPrompting) {
  const std::string key =
      Write("locked.key", ToPem(server_->key, EVP_aes_128_cbc()));
  absl::Status s = ServerError({Path("server.crt"), key, ""});
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("is encrypted"));
}

TEST_F(TransportSecurityTest, TlsServerRefusesPlaintextAndUntrustingClients) {
  absl::StatusOr<TransportSecurity> server = LoadTransportSecurity(
      {Path("server.crt"), Path("server.key"), ""}, TlsRole::kServer);
  ASSERT_TRUE(server.ok()) << server.status();
  int port = 0;
  absl::StatusOr<std::unique_ptr<grpc::Server>> started =
      StartServer("127.0.0.1:0", "--listen", {}, &port, *server);
  ASSERT_TRUE(started.ok()) << started.status();
  const std::string address = "127.0.0.1:" + std::to_string(port);
  const auto timeout = std::chrono::milliseconds(5000);

  absl::StatusOr<TransportSecurity> trusting =
      LoadTransportSecurity({"", "", Path("ca.crt")}, TlsRole::kClient);
  ASSERT_TRUE(trusting.ok());
  absl::StatusOr<ServingStatus> health =
      CheckHealth(address, "", timeout, *trusting);
  ASSERT_TRUE(health.ok()) << health.status();
  EXPECT_EQ(*health, ServingStatus::kServing);

  EXPECT_FALSE(CheckHealth(address, "", timeout).ok());  // plaintext
  std::unique_ptr<Identity> other_ca =
      MakeIdentity("other-ca", nullptr, 30, true);
  absl::StatusOr<TransportSecurity> wrong = LoadTransportSecurity(
      {"", "", Write("other-ca.crt", other_ca->cert_pem)}, TlsRole::kClient);
  ASSERT_TRUE(wrong.ok());
  EXPECT_FALSE(CheckHealth(address, "", timeout, *wrong).ok());
  (*started)->Shutdown();
}

TEST(BearerToken, ParsedTrimmedAndChecked) {
  absl::StatusOr<std::string> t = ParseBearerToken("  abc.DEF-123\n", "x");
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(*t, "abc.DEF-123");
  EXPECT_THAT(ParseBearerToken("\n", "--auth-token-file").status().message(),
              HasSubstr("--auth-token-file: the token is empty"));
  EXPECT_THAT(ParseBearerToken("two words", "x").status().message(),
              HasSubstr("printable ASCII without spaces"));
  EXPECT_TRUE(LoadBearerToken("", "--auth-token-file")->empty());
  absl::Status missing =
      LoadBearerToken("/nonexistent/token", "--auth-token-file").status();
  EXPECT_EQ(missing.code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(missing.message(),
              HasSubstr("--auth-token-file: cannot read /nonexistent/token"));
}

TEST(BearerToken, ClientFallsBackToTheEnvironment) {
  setenv(kAuthTokenEnv, "from-env", 1);
  EXPECT_EQ(*ClientBearerToken("", "--auth-token-file"), "from-env");
  setenv(kAuthTokenEnv, "bad token", 1);
  EXPECT_THAT(ClientBearerToken("", "--auth-token-file").status().message(),
              HasSubstr("PETRA_AUTH_TOKEN"));
  unsetenv(kAuthTokenEnv);
  EXPECT_TRUE(ClientBearerToken("", "--auth-token-file")->empty());
}

}  // namespace
}  // namespace petra::wire

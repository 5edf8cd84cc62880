#include "services/wire/transport_security.h"

#include <grpc/grpc_security_constants.h>
#include <grpcpp/security/auth_context.h>
#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "services/base/small_file.h"

namespace petra::wire {
namespace {

// PEM files are a few KiB; a bigger one is a wrong path, not a certificate.
constexpr int64_t kMaxPemBytes = 1 << 20;

struct BioFree {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Free {
  void operator()(X509* x) const { X509_free(x); }
};
struct KeyFree {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using Bio = std::unique_ptr<BIO, BioFree>;
using Certificate = std::unique_ptr<X509, X509Free>;
using PrivateKey = std::unique_ptr<EVP_PKEY, KeyFree>;

Bio MemoryBio(const std::string& pem) {
  return Bio(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// OpenSSL's default would prompt on the terminal for an encrypted key.
int NoPassphrase(char*, int, int, void*) { return -1; }

std::vector<Certificate> ReadCertificates(const std::string& pem) {
  std::vector<Certificate> out;
  Bio bio = MemoryBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    out.emplace_back(x);
  }
  ERR_clear_error();  // the end of the file reads as an error
  return out;
}

std::string CommonName(X509* certificate) {
  char buffer[256] = {0};
  int n = X509_NAME_get_text_by_NID(X509_get_subject_name(certificate),
                                    NID_commonName, buffer, sizeof(buffer));
  return n > 0 ? std::string(buffer, static_cast<size_t>(n)) : "";
}

std::string TimeText(const ASN1_TIME* time) {
  Bio bio(BIO_new(BIO_s_mem()));
  ASN1_TIME_print(bio.get(), time);
  char* data = nullptr;
  long n = BIO_get_mem_data(bio.get(), &data);
  return std::string(data, static_cast<size_t>(n));
}

absl::StatusOr<std::string> ReadPem(const std::string& path,
                                    const std::string& flag) {
  absl::StatusOr<std::string> text =
      base::ReadSmallFile(path, kMaxPemBytes, "a PEM file");
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat(flag, ": cannot read ", text.status().message()));
  }
  return text;
}

// The certificate (chain) file's leaf, checked: present and not expired.
absl::StatusOr<Certificate> CheckCertificate(const std::string& pem,
                                             const std::string& path,
                                             const std::string& flag) {
  std::vector<Certificate> chain = ReadCertificates(pem);
  if (chain.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag, ": \"", path, "\" holds no PEM certificate (BEGIN CERTIFICATE)"));
  }
  const ASN1_TIME* not_after = X509_get0_notAfter(chain[0].get());
  if (X509_cmp_current_time(not_after) < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(flag, ": the certificate in \"", path, "\" expired on ",
                     TimeText(not_after)));
  }
  return std::move(chain[0]);
}

absl::StatusOr<PrivateKey> CheckKey(const std::string& pem,
                                    const std::string& path) {
  Bio bio = MemoryBio(pem);
  PrivateKey key(
      PEM_read_bio_PrivateKey(bio.get(), nullptr, &NoPassphrase, nullptr));
  ERR_clear_error();
  if (key == nullptr) {
    if (absl::StrContains(pem, "ENCRYPTED")) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-key: \"", path,
                       "\" is encrypted; give the key without a passphrase "
                       "(and protect the file instead)"));
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls-key: \"", path, "\" holds no PEM private key (BEGIN ... KEY)"));
  }
  return key;
}

}  // namespace

std::string TransportSecurity::Describe() const {
  if (!enabled()) return "plaintext";
  std::string kind = mutual() ? "mutual TLS" : "TLS";
  if (identity.empty()) return kind;
  return absl::StrCat(kind, " (identity ", identity, ")");
}

absl::StatusOr<TransportSecurity> LoadTransportSecurity(
    const TlsOptions& options, TlsRole role) {
  TransportSecurity out;
  if (options.empty()) return out;
  if (!options.cert_file.empty() && options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-cert is set but --tls-key is not: a certificate needs its "
        "private key");
  }
  if (options.cert_file.empty() && !options.key_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-key is set but --tls-cert is not: give the certificate of the "
        "key too");
  }
  if (role == TlsRole::kServer && options.cert_file.empty()) {
    return absl::InvalidArgumentError(
        "--tls-ca on a server requires client certificates, which needs TLS: "
        "give --tls-cert and --tls-key too");
  }
  if (!options.cert_file.empty()) {
    absl::StatusOr<std::string> cert = ReadPem(options.cert_file, "--tls-cert");
    if (!cert.ok()) return cert.status();
    absl::StatusOr<std::string> key = ReadPem(options.key_file, "--tls-key");
    if (!key.ok()) return key.status();
    absl::StatusOr<Certificate> leaf =
        CheckCertificate(*cert, options.cert_file, "--tls-cert");
    if (!leaf.ok()) return leaf.status();
    absl::StatusOr<PrivateKey> private_key = CheckKey(*key, options.key_file);
    if (!private_key.ok()) return private_key.status();
    if (X509_check_private_key(leaf->get(), private_key->get()) != 1) {
      ERR_clear_error();
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-key: \"", options.key_file,
                       "\" is not the private key of the certificate in \"",
                       options.cert_file, "\" (--tls-cert)"));
    }
    out.identity = CommonName(leaf->get());
    out.cert_pem = std::move(*cert);
    out.key_pem = std::move(*key);
  }
  if (!options.ca_file.empty()) {
    absl::StatusOr<std::string> ca = ReadPem(options.ca_file, "--tls-ca");
    if (!ca.ok()) return ca.status();
    if (ReadCertificates(*ca).empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--tls-ca: \"", options.ca_file,
                       "\" holds no PEM certificate (BEGIN CERTIFICATE)"));
    }
    out.ca_pem = std::move(*ca);
  }
  return out;
}

std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const TransportSecurity& security) {
  if (!security.enabled()) return grpc::InsecureServerCredentials();
  grpc::SslServerCredentialsOptions options(
      security.mutual()
          ? GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY
          : GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE);
  options.pem_root_certs = security.ca_pem;
  options.pem_key_cert_pairs.push_back({security.key_pem, security.cert_pem});
  return grpc::SslServerCredentials(options);
}

std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TransportSecurity& security) {
  if (!security.enabled()) return grpc::InsecureChannelCredentials();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = security.ca_pem;  // empty: the system's roots
  options.pem_private_key = security.key_pem;
  options.pem_cert_chain = security.cert_pem;
  return grpc::SslCredentials(options);
}

std::string PeerIdentity::Describe() const {
  if (!authenticated) return "no client certificate";
  std::string out = absl::StrCat("CN \"", common_name, "\"");
  if (!dns_names.empty()) {
    absl::StrAppend(&out, ", DNS ", absl::StrJoin(dns_names, ", "));
  }
  return out;
}

PeerIdentity PeerIdentityOf(const grpc::AuthContext& context) {
  PeerIdentity peer;
  peer.authenticated = context.IsPeerAuthenticated();
  for (const grpc::string_ref& v :
       context.FindPropertyValues(GRPC_X509_CN_PROPERTY_NAME)) {
    peer.common_name.assign(v.data(), v.size());
  }
  for (const grpc::string_ref& v :
       context.FindPropertyValues(GRPC_PEER_DNS_PROPERTY_NAME)) {
    peer.dns_names.emplace_back(v.data(), v.size());
  }
  return peer;
}

absl::Status RequirePeerIdentity(const grpc::AuthContext& context,
                                 const std::string& expected,
                                 const std::string& call) {
  const PeerIdentity peer = PeerIdentityOf(context);
  if (peer.authenticated) {
    if (peer.common_name == expected) return absl::OkStatus();
    for (const std::string& name : peer.dns_names) {
      if (name == expected) return absl::OkStatus();
    }
  }
  return absl::PermissionDeniedError(
      absl::StrCat(call, " is only accepted from the coordinator (identity \"",
                   expected, "\"); this peer presented ", peer.Describe()));
}

}  // namespace petra::wire

// TLS and mutual TLS for every gRPC connection, in one place: the
// certificate files named by --tls-cert, --tls-key and --tls-ca are read and
// checked here, and every server and channel builds its credentials from
// the result. All three empty means plaintext (the default).
//
// On a server, cert + key switch TLS on; adding a CA requires every client
// to present a certificate signed by it (mutual TLS). On a client, the CA
// verifies the server (empty: the system's roots) and cert + key present a
// client certificate. A server that also calls out (the coordinator to its
// stages, a stage to its neighbours) uses the same files both ways.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace grpc {
class AuthContext;
class ChannelCredentials;
class ServerCredentials;
}  // namespace grpc

namespace petra::wire {

// The flag values: paths of PEM files.
struct TlsOptions {
  std::string cert_file;  // --tls-cert: own certificate (chain)
  std::string key_file;   // --tls-key: its private key
  std::string ca_file;    // --tls-ca: CA certificates that verify the peer
  bool empty() const {
    return cert_file.empty() && key_file.empty() && ca_file.empty();
  }
};

// What TlsOptions name, read and checked. Default-constructed: plaintext.
struct TransportSecurity {
  std::string cert_pem;
  std::string key_pem;
  std::string ca_pem;
  // The own certificate's common name, for logs ("" without one).
  std::string identity;

  bool enabled() const { return !cert_pem.empty() || !ca_pem.empty(); }
  // As a server: client certificates are required and verified.
  bool mutual() const { return !cert_pem.empty() && !ca_pem.empty(); }
  // "plaintext", "TLS (identity X)" or "mutual TLS (identity X)".
  std::string Describe() const;
};

enum class TlsRole { kServer, kClient };

// Reads and checks the files: cert and key given together and matching,
// every file readable PEM of the right kind, the certificate not expired; on
// a server a CA only together with cert + key. INVALID_ARGUMENT (or the
// file's NOT_FOUND / PERMISSION_DENIED) naming the flag and the file.
absl::StatusOr<TransportSecurity> LoadTransportSecurity(
    const TlsOptions& options, TlsRole role);

// Insecure credentials when !security.enabled().
std::shared_ptr<grpc::ServerCredentials> MakeServerCredentials(
    const TransportSecurity& security);
std::shared_ptr<grpc::ChannelCredentials> MakeChannelCredentials(
    const TransportSecurity& security);

// Who is on the other end of a call, from its verified client certificate.
struct PeerIdentity {
  bool authenticated = false;  // a verified certificate was presented
  std::string common_name;
  std::vector<std::string> dns_names;  // subject alternative names
  // `CN "x", DNS a, b` or "no client certificate".
  std::string Describe() const;
};
PeerIdentity PeerIdentityOf(const grpc::AuthContext& context);

// OK when the peer's certificate names `expected` (its CN or one of its DNS
// names); PERMISSION_DENIED saying what `call` needs and what was seen.
absl::Status RequirePeerIdentity(const grpc::AuthContext& context,
                                 const std::string& expected,
                                 const std::string& call);

}  // namespace petra::wire

#include "services/wire/tls_flags.h"

#include "absl/strings/str_cat.h"

namespace petra::wire {

void AddClientTlsFlags(base::FlagSet& flags, TlsOptions* tls) {
  flags.AddString("tls-ca", &tls->ca_file,
                  "PEM CA certificates that verify the server: connect with "
                  "TLS (empty, with --tls-cert: the system's roots)");
  flags.AddString("tls-cert", &tls->cert_file,
                  "PEM client certificate, for a server that requires one "
                  "(mutual TLS); with --tls-key");
  flags.AddString("tls-key", &tls->key_file, "PEM private key of --tls-cert");
}

void AddServerTlsFlags(base::FlagSet& flags, TlsOptions* tls,
                       const std::string& peers) {
  flags.AddString("tls-cert", &tls->cert_file,
                  absl::StrCat("PEM certificate: serve TLS (with --tls-key), "
                               "and present it to ",
                               peers));
  flags.AddString("tls-key", &tls->key_file, "PEM private key of --tls-cert");
  flags.AddString("tls-ca", &tls->ca_file,
                  absl::StrCat("PEM CA certificates: require and verify "
                               "client certificates (mutual TLS) and verify ",
                               peers));
}

}  // namespace petra::wire

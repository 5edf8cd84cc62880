#include "client/tls_flags.h"

namespace petra::client {

void AddClientTlsFlags(cli::FlagSet& flags, wire::TlsOptions* tls) {
  flags.AddString("tls-ca", &tls->ca_file,
                  "PEM CA certificates that verify the server: connect with "
                  "TLS (empty, with --tls-cert: the system's roots)");
  flags.AddString("tls-cert", &tls->cert_file,
                  "PEM client certificate, for a server that requires one "
                  "(mutual TLS); with --tls-key");
  flags.AddString("tls-key", &tls->key_file, "PEM private key of --tls-cert");
}

}  // namespace petra::client

#include "services/base/secret_key.h"

#include <openssl/rand.h>

#include <cstdio>
#include <cstdlib>

#include "absl/strings/escaping.h"

namespace petra::base {

std::string NewSecretKey() {
  unsigned char bytes[kSecretKeyLength / 2];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1) {
    std::fprintf(stderr, "fatal: OpenSSL's RAND_bytes gave no key\n");
    std::abort();
  }
  return absl::BytesToHexString(
      absl::string_view(reinterpret_cast<const char*>(bytes), sizeof(bytes)));
}

bool IsSecretKey(absl::string_view text) {
  if (text.size() != kSecretKeyLength) return false;
  for (char c : text) {
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return true;
}

}  // namespace petra::base

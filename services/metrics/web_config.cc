#include "services/metrics/web_config.h"

#include <crypt.h>

#include <cstring>

#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "services/base/constant_time.h"
#include "yaml-cpp/yaml.h"

namespace petra::metrics {
namespace {

bool IsBcrypt(const std::string& hash) {
  return hash.size() == 60 &&
         (absl::StartsWith(hash, "$2a$") || absl::StartsWith(hash, "$2b$") ||
          absl::StartsWith(hash, "$2y$"));
}

absl::Status Refuse(const std::string& where, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat(where, ": ", why));
}

}  // namespace

absl::StatusOr<WebConfig> ReadWebConfig(const std::string& path,
                                        const std::string& flag) {
  WebConfig config;
  if (path.empty()) return config;
  const std::string where = absl::StrCat(flag, " \"", path, "\"");
  YAML::Node root;
  try {
    root = YAML::LoadFile(path);
  } catch (const YAML::BadFile&) {
    return Refuse(where, "cannot read it");
  } catch (const YAML::Exception& e) {
    return Refuse(where, e.what());
  }
  if (root.IsNull()) return config;  // an empty file: no auth
  if (!root.IsMap()) return Refuse(where, "expected a YAML mapping");
  try {
    for (const auto& entry : root) {
      const std::string key = entry.first.as<std::string>();
      const YAML::Node& value = entry.second;
      if (key == "tls_server_config") {
        return Refuse(
            where,
            "tls_server_config: not supported: Debian 12's civetweb (the "
            "/metrics server) crashed on TLS with its OpenSSL 3; keep "
            "/metrics on the fleet's network (docs/DEPLOY.md)");
      } else if (key == "basic_auth_users") {
        if (!value.IsMap()) return Refuse(where, key + ": expected a mapping");
        for (const auto& u : value) {
          const std::string user = u.first.as<std::string>();
          const std::string hash = u.second.as<std::string>();
          if (user.empty() || user.find(':') != std::string::npos) {
            return Refuse(where, absl::StrCat(key, ": user \"", user,
                                              "\" must be non-empty, no ':'"));
          }
          if (!IsBcrypt(hash)) {
            return Refuse(where,
                          absl::StrCat(key, ".", user,
                                       ": not a bcrypt hash ($2y$..., 60 "
                                       "characters; htpasswd -nBC 10 \"\" "
                                       "makes one)"));
          }
          config.basic_auth_users[user] = hash;
        }
      } else {
        return Refuse(where, absl::StrCat(key,
                                          ": not supported here "
                                          "(basic_auth_users is)"));
      }
    }
  } catch (const YAML::Exception& e) {
    return Refuse(where, e.what());
  }
  return config;
}

bool BasicAuthAllows(const WebConfig& config, const char* authorization) {
  if (config.basic_auth_users.empty()) return true;
  if (authorization == nullptr) return false;
  const std::string header(authorization);
  constexpr char kBasic[] = "Basic ";
  if (!absl::StartsWithIgnoreCase(header, kBasic)) return false;
  std::string decoded;
  if (!absl::Base64Unescape(header.substr(sizeof(kBasic) - 1), &decoded)) {
    return false;
  }
  const size_t colon = decoded.find(':');
  if (colon == std::string::npos) return false;
  auto it = config.basic_auth_users.find(decoded.substr(0, colon));
  if (it == config.basic_auth_users.end()) return false;
  const std::string password = decoded.substr(colon + 1);
  crypt_data data;
  std::memset(&data, 0, sizeof(data));
  const char* hashed = crypt_r(password.c_str(), it->second.c_str(), &data);
  return hashed != nullptr && base::ConstantTimeEquals(hashed, it->second);
}

}  // namespace petra::metrics

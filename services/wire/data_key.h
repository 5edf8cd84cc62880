// A job's data key on the wire (AssignRequest.data_key): the header a data
// stream presents it in, read and written. Comparing it is the host's
// (StageHost::AdmitData), in constant time.
#pragma once

#include <grpcpp/client_context.h>
#include <grpcpp/server_context.h>

#include <string>

namespace petra::wire {

inline constexpr char kDataKeyHeader[] = "petra-data-key";

// The key the call presents; "" when it presents none.
inline std::string PresentedDataKey(const grpc::ServerContextBase& context) {
  const auto& metadata = context.client_metadata();
  auto it = metadata.find(kDataKeyHeader);
  return it == metadata.end()
             ? std::string()
             : std::string(it->second.data(), it->second.size());
}

// Presents `key` on the call of `context` (before it starts).
inline void PresentDataKey(grpc::ClientContext* context,
                           const std::string& key) {
  if (!key.empty()) context->AddMetadata(kDataKeyHeader, key);
}

}  // namespace petra::wire

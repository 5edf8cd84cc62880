// What StageHost's sources share (stage_host.cc, stage_host_assign.cc).
#pragma once

#include "petra/v1/common.pb.h"

namespace petra::engine {
struct MemoryStats;
}  // namespace petra::engine

namespace petra::stage_server::host_internal {

// UNAVAILABLE, as gRPC answers a server that is shutting down: the caller
// may try again elsewhere or once the server has restarted.
inline constexpr char kDraining[] =
    "the stage server is draining: it takes no new work before it stops";

// Memory as the wire carries it, with this process's resident set.
petra::v1::MemoryBreakdown MemoryWithRss(const engine::MemoryStats& m);

}  // namespace petra::stage_server::host_internal

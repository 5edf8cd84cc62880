// Which data channel a link uses: the job's `transport` and both ends'
// LinkEndpoint decide, in one place (the coordinator calls this for every
// link at Assign). No torch, no gRPC.
#pragma once

#include <string>

#include "absl/status/statusor.h"
#include "petra/v1/stage.pb.h"

namespace petra::link {

// "grpc", "grpc_bulk", "shm", "cuda_ipc", "auto".
std::string TransportName(petra::v1::Transport t);

// AUTO (or UNSPECIFIED): CUDA IPC when both ends offer it, share memory and
// run on GPUs that can map each other's memory (one GPU, or peers: each
// end's `device` names its GPU); else shared memory when both ends offer it
// and see the same /dev/shm; else the bulk gRPC channel when both offer it;
// else gRPC bytes in the messages. A forced transport that one end lacks is
// FAILED_PRECONDITION naming the link (`link`, e.g. "stage 0 -> stage 1")
// and why.
absl::StatusOr<petra::v1::Transport> ChooseTransport(
    petra::v1::Transport wanted, const petra::v1::LinkEndpoint& sender,
    const petra::v1::LinkEndpoint& receiver, const std::string& link);

// The same for the coordinator's feed into a stage (`coordinator` is the
// coordinator's own endpoint). Its micro-batches are inputs and labels,
// small beside the activations, built on the host, and the coordinator
// serves no data channel of its own: it uses shared memory where it can and
// its messages elsewhere, also when the job asked for grpc_bulk or
// cuda_ipc.
absl::StatusOr<petra::v1::Transport> ChooseFeedTransport(
    petra::v1::Transport wanted, const petra::v1::LinkEndpoint& coordinator,
    const petra::v1::LinkEndpoint& stage, const std::string& link);

}  // namespace petra::link

// The receiving end of the bulk gRPC channel (TRANSPORT_GRPC_BULK): every
// stage server registers it beside its StageService. One reactor per
// stream copies each frame into the inbox and acknowledges it; a bad frame
// ends that stream with INVALID_ARGUMENT (the sender's Place fails). A
// stream whose data key (wire/data_key.h) the admission refuses ends
// UNAUTHENTICATED before a frame is read, and so does one whose key stops
// being admitted (the job was released).
#pragma once

#include <grpcpp/grpcpp.h>

#include <functional>
#include <string>

#include "absl/status/status.h"
#include "petra/v1/bulk.grpc.pb.h"
#include "services/link/bulk_inbox.h"

namespace petra::link {

class BulkReceiver final
    : public petra::v1::BulkService::WithRawCallbackMethod_Push<
          petra::v1::BulkService::Service> {
 public:
  // OK when a stream presenting `data_key` may bring frames; otherwise why
  // not (the stage server's: its job's key, in constant time).
  using Admission = std::function<absl::Status(const std::string& data_key)>;
  // Admits the streams that present `key` (tools and tests: a stage
  // server admits its job's key, which changes).
  static Admission KeyIs(std::string key);
  explicit BulkReceiver(Admission admit, BulkInbox& inbox = BulkInbox::Global())
      : admit_(std::move(admit)), inbox_(inbox) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* context) override;

 private:
  const Admission admit_;
  BulkInbox& inbox_;
};

}  // namespace petra::link

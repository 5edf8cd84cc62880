// The receiving end of the bulk gRPC channel (TRANSPORT_GRPC_BULK): every
// stage server registers it beside its StageService. One reactor per
// stream copies each frame into the inbox and acknowledges it; a bad frame
// ends that stream with INVALID_ARGUMENT (the sender's Place fails).
#pragma once

#include <grpcpp/grpcpp.h>

#include "petra/v1/bulk.grpc.pb.h"
#include "services/link/bulk_inbox.h"

namespace petra::link {

class BulkReceiver final
    : public petra::v1::BulkService::WithRawCallbackMethod_Push<
          petra::v1::BulkService::Service> {
 public:
  explicit BulkReceiver(BulkInbox& inbox = BulkInbox::Global())
      : inbox_(inbox) {}
  grpc::ServerBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer>* Push(
      grpc::CallbackServerContext* context) override;

 private:
  BulkInbox& inbox_;
};

}  // namespace petra::link

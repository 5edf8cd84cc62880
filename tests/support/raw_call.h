// One call of any RPC as raw bytes, the way a stranger's tool sends it (the
// wire does not tell unary and streaming calls apart): its messages written
// and the writes closed, every reply read, its final status. Quiet calls
// write nothing and keep their writes open until cancelled (a caller that
// opens a call and goes silent). For the hostile-input tests and the
// service fuzzer.
#pragma once

#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <future>
#include <string>
#include <utility>
#include <vector>

namespace petra::testing {

class RawCall
    : public grpc::ClientBidiReactor<grpc::ByteBuffer, grpc::ByteBuffer> {
 public:
  using Headers = std::vector<std::pair<std::string, std::string>>;

  RawCall(grpc::GenericStub& stub, const std::string& method,
          const std::vector<std::string>& messages, const Headers& headers,
          std::chrono::seconds deadline, bool quiet = false) {
    for (const std::string& m : messages) {
      grpc::Slice slice(m);
      out_.emplace_back(&slice, 1);
    }
    for (const auto& [k, v] : headers) context_.AddMetadata(k, v);
    context_.set_deadline(std::chrono::system_clock::now() + deadline);
    stub.PrepareBidiStreamingCall(&context_, method, grpc::StubOptions(), this);
    StartRead(&in_);
    if (!quiet) Next();
    StartCall();
  }
  void OnWriteDone(bool ok) override {
    if (ok) Next();
  }
  void OnReadDone(bool ok) override {
    if (!ok) return;
    if (first_reply_.empty()) {
      std::vector<grpc::Slice> slices;
      if (in_.Dump(&slices).ok()) {
        for (const grpc::Slice& s : slices) {
          first_reply_.append(reinterpret_cast<const char*>(s.begin()),
                              s.size());
        }
      }
    }
    StartRead(&in_);
  }
  void OnDone(const grpc::Status& s) override { done_.set_value(s); }

  grpc::Status Wait() { return done_.get_future().get(); }
  void Cancel() { context_.TryCancel(); }
  // The first message the server sent (after Wait).
  const std::string& first_reply() const { return first_reply_; }

 private:
  void Next() {
    if (next_ < out_.size()) {
      StartWrite(&out_[next_++]);
    } else if (!closed_) {
      closed_ = true;
      StartWritesDone();
    }
  }

  grpc::ClientContext context_;
  std::vector<grpc::ByteBuffer> out_;
  size_t next_ = 0;
  bool closed_ = false;
  grpc::ByteBuffer in_;
  std::string first_reply_;
  std::promise<grpc::Status> done_;
};

}  // namespace petra::testing

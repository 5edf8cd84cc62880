#include "tests/integration/probes.h"

#include <arpa/inet.h>
#include <grpcpp/generic/generic_stub.h>
#include <grpcpp/grpcpp.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <future>

#include "services/wire/health_check.h"

namespace petra::testing {
namespace {

grpc::ByteBuffer ToBuffer(const std::string& bytes) {
  grpc::Slice slice(bytes);
  return grpc::ByteBuffer(&slice, 1);
}

std::string FromBuffer(const grpc::ByteBuffer& buffer) {
  grpc::Slice slice;
  if (!buffer.TrySingleSlice(&slice).ok() &&
      !buffer.DumpToSingleSlice(&slice).ok()) {
    return "";
  }
  return std::string(reinterpret_cast<const char*>(slice.begin()),
                     slice.size());
}

auto Deadline() {
  return std::chrono::system_clock::now() + std::chrono::seconds(10);
}

}  // namespace

int HealthCheck(const std::string& address) {
  absl::StatusOr<wire::ServingStatus> status =
      wire::CheckHealth(address, "", std::chrono::seconds(10));
  return status.ok() ? static_cast<int>(*status) : -1;
}

std::string ReflectionListServices(const std::string& address) {
  grpc::GenericStub stub(
      grpc::CreateChannel(address, grpc::InsecureChannelCredentials()));
  grpc::ClientContext context;
  context.set_deadline(Deadline());
  grpc::CompletionQueue cq;
  auto call = stub.PrepareCall(
      &context,
      "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo", &cq);
  void* tag;
  bool ok;
  auto step = [&](int id) {
    return cq.Next(&tag, &ok) && ok && tag == reinterpret_cast<void*>(id);
  };
  call->StartCall(reinterpret_cast<void*>(1));
  auto fail = [&]() {
    context.TryCancel();
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
    return std::string();
  };
  if (!step(1)) return fail();
  // ServerReflectionRequest{list_services: ""}: field 7, length 0.
  grpc::ByteBuffer request = ToBuffer(std::string("\x3a\x00", 2));
  call->Write(request, reinterpret_cast<void*>(2));
  if (!step(2)) return fail();
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  if (!step(3)) return fail();
  call->WritesDone(reinterpret_cast<void*>(4));
  step(4);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  step(5);
  // A completion queue must be shut down and drained before it is destroyed.
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return FromBuffer(response);
}

std::string HttpGet(int port, const std::string& path) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return "";
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  std::string response;
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    std::string request =
        "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
    if (write(fd, request.data(), request.size()) ==
        static_cast<ssize_t>(request.size())) {
      char buf[4096];
      ssize_t n;
      while ((n = read(fd, buf, sizeof(buf))) > 0) response.append(buf, n);
    }
  }
  close(fd);
  size_t body = response.find("\r\n\r\n");
  return body == std::string::npos ? "" : response.substr(body + 4);
}

int UnusedLoopbackPort() {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a));
  socklen_t len = sizeof(a);
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  close(fd);
  return ntohs(a.sin_port);
}

}  // namespace petra::testing

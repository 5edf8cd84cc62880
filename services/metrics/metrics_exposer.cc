#include "services/metrics/metrics_exposer.h"

#include <CivetServer.h>
#include <dlfcn.h>
#include <netdb.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <exception>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "services/version.h"

// civetweb (the exposer's HTTP server) creates its threads with a fixed
// 100 KiB stack. libopenblas, glog and libtorch together put more than that in
// static thread-local storage, so in a torch process pthread_create fails with
// EINVAL and the exposer cannot start ("Cannot create threads"). Raising every
// requested stack to at least 1 MiB fixes it; it only reserves address space.
// Exported from the executable (see services/CMakeLists.txt) so that the
// libraries' calls resolve here first.
extern "C" int pthread_attr_setstacksize(pthread_attr_t* attr, size_t size) {
  using Fn = int (*)(pthread_attr_t*, size_t);
  static const Fn real =
      reinterpret_cast<Fn>(dlsym(RTLD_NEXT, "pthread_attr_setstacksize"));
  constexpr size_t kMinimumStackBytes = size_t{1} << 20;
  return real(attr, std::max(size, kMinimumStackBytes));
}

namespace petra::metrics {
namespace {

// The host to connect to for a server listening on `address` (host:port):
// loopback for a wildcard.
std::string ConnectHost(const std::string& address) {
  const size_t colon = address.rfind(':');
  std::string host = colon == std::string::npos ? "" : address.substr(0, colon);
  if (host.size() >= 2 && host.front() == '[' && host.back() == ']') {
    host = host.substr(1, host.size() - 2);
  }
  if (host.empty() || host == "0.0.0.0") return "127.0.0.1";
  if (host == "::") return "::1";
  return host;
}

// Opens and closes one connection to host:port; failures do not matter.
void Knock(const std::string& host, int port) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) !=
      0) {
    return;
  }
  for (addrinfo* a = found; a != nullptr; a = a->ai_next) {
    const int fd =
        socket(a->ai_family, a->ai_socktype | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    const bool connected = connect(fd, a->ai_addr, a->ai_addrlen) == 0;
    close(fd);
    if (connected) break;
  }
  freeaddrinfo(found);
}

// civetweb gives each connection a thread of its own until the request has
// been read: with 2 threads, two idle connections kept every scrape waiting
// 30 s (its default timeout). 128 threads hold 100 idle connections with
// room for scrapes, and an idle connection is dropped after 2 s. Each
// thread reserves address space only (a 1 MiB stack, see above).
constexpr int kServingThreads = 128;
constexpr int kRequestTimeoutMs = 2000;

}  // namespace

// GET /metrics: the registry in the Prometheus text format (0.0.4).
class MetricsExposer::Handler : public CivetHandler {
 public:
  Handler(std::shared_ptr<prometheus::Registry> registry, WebConfig web)
      : registry_(std::move(registry)), web_(std::move(web)) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
    if (!BasicAuthAllows(web_, mg_get_header(conn, "Authorization"))) {
      static constexpr char kRefusal[] = "credentials required\n";
      mg_printf(conn,
                "HTTP/1.1 401 Unauthorized\r\n"
                "WWW-Authenticate: Basic realm=\"petra metrics\"\r\n"
                "Content-Type: text/plain\r\n"
                "Content-Length: %zu\r\n"
                "Connection: close\r\n\r\n%s",
                sizeof(kRefusal) - 1, kRefusal);
      return true;
    }
    // prometheus-cpp writes NaN as "Nan"; the format says "NaN". A value
    // is always the last token of its line.
    const std::string body = absl::StrReplaceAll(
        prometheus::TextSerializer().Serialize(registry_->Collect()),
        {{" Nan\n", " NaN\n"}});
    mg_printf(conn,
              "HTTP/1.1 200 OK\r\n"
              "Content-Type: text/plain; version=0.0.4; charset=utf-8\r\n"
              "Content-Length: %zu\r\n"
              "Connection: close\r\n\r\n",
              body.size());
    mg_write(conn, body.data(), body.size());
    return true;
  }

 private:
  std::shared_ptr<prometheus::Registry> registry_;
  const WebConfig web_;
};

MetricsExposer::MetricsExposer(WebConfig web)
    : registry_(std::make_shared<prometheus::Registry>()),
      handler_(std::make_unique<Handler>(registry_, std::move(web))) {}

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address, const std::string& component,
    const WebConfig& web) {
  std::unique_ptr<MetricsExposer> m(new MetricsExposer(web));
  try {
    // civetweb reports a failed bind by exception; it stops here.
    m->server_ = std::make_unique<CivetServer>(std::vector<std::string>{
        "listening_ports", address, "num_threads",
        std::to_string(kServingThreads), "request_timeout_ms",
        std::to_string(kRequestTimeoutMs)});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "--metrics-listen: cannot serve metrics on ", address, ": ", e.what()));
  }
  m->server_->addHandler("/metrics", m->handler_.get());
  std::vector<int> ports = m->server_->getListeningPorts();
  m->port_ = ports.empty() ? 0 : ports.front();
  m->connect_host_ = ConnectHost(address);
  prometheus::BuildGauge()
      .Name("petra_build_info")
      .Help("Build of this process; the value is always 1")
      .Register(*m->registry_)
      .Add({{"component", component}, {"version", kVersion}})
      .Set(1);
  return m;
}

MetricsExposer::~MetricsExposer() {
  if (server_ == nullptr) return;
  // civetweb's accept loop looks at its stop flag only between polls of 2 s
  // (SOCKET_TIMEOUT_QUANTUM), so a bare close() took up to 2 s, and
  // `petra train` waited 7 s after its job for its four servers. A
  // connection wakes the poll: knock until close() is through.
  std::atomic<bool> closed{false};
  std::thread knocker([this, &closed] {
    while (!closed.load()) {
      Knock(connect_host_, port_);
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
  });
  server_->close();  // no request in flight after
  closed.store(true);
  knocker.join();
}

}  // namespace petra::metrics

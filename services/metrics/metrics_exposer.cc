#include "services/metrics/metrics_exposer.h"

#include <CivetServer.h>
#include <dlfcn.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <prometheus/text_serializer.h>
#include <pthread.h>

#include <algorithm>
#include <exception>

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

// GET /metrics: the registry in the Prometheus text format (0.0.4).
class MetricsExposer::Handler : public CivetHandler {
 public:
  explicit Handler(std::shared_ptr<prometheus::Registry> registry)
      : registry_(std::move(registry)) {}

  bool handleGet(CivetServer*, mg_connection* conn) override {
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
};

MetricsExposer::MetricsExposer()
    : registry_(std::make_shared<prometheus::Registry>()),
      handler_(std::make_unique<Handler>(registry_)) {}

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address, const std::string& component) {
  std::unique_ptr<MetricsExposer> m(new MetricsExposer());
  try {
    // civetweb reports a failed bind by exception; it stops here.
    m->server_ = std::make_unique<CivetServer>(std::vector<std::string>{
        "listening_ports", address, "num_threads", "2"});
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "--metrics-listen: cannot serve metrics on ", address, ": ", e.what()));
  }
  m->server_->addHandler("/metrics", m->handler_.get());
  std::vector<int> ports = m->server_->getListeningPorts();
  m->port_ = ports.empty() ? 0 : ports.front();
  prometheus::BuildGauge()
      .Name("petra_build_info")
      .Help("Build of this process; the value is always 1")
      .Register(*m->registry_)
      .Add({{"component", component}, {"version", kVersion}})
      .Set(1);
  return m;
}

MetricsExposer::~MetricsExposer() {
  if (server_ != nullptr) server_->close();  // no request in flight after
}

}  // namespace petra::metrics

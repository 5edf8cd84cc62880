#include "services/metrics/metrics_exposer.h"

#include <dlfcn.h>
#include <prometheus/exposer.h>
#include <prometheus/gauge.h>
#include <prometheus/registry.h>
#include <pthread.h>

#include <algorithm>
#include <exception>

#include "absl/strings/str_cat.h"
#include "services/version.h"

// civetweb (under prometheus-cpp's Exposer) creates its threads with a fixed
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

absl::StatusOr<std::unique_ptr<MetricsExposer>> MetricsExposer::Start(
    const std::string& address, const std::string& component) {
  std::unique_ptr<MetricsExposer> m(new MetricsExposer());
  try {
    // civetweb reports a failed bind by exception; it stops here.
    m->exposer_ = std::make_unique<prometheus::Exposer>(address, 2);
  } catch (const std::exception& e) {
    return absl::UnavailableError(absl::StrCat(
        "--metrics-listen: cannot serve metrics on ", address, ": ", e.what()));
  }
  std::vector<int> ports = m->exposer_->GetListeningPorts();
  m->port_ = ports.empty() ? 0 : ports.front();
  m->registry_ = std::make_shared<prometheus::Registry>();
  prometheus::BuildGauge()
      .Name("petra_build_info")
      .Help("Build of this process; the value is always 1")
      .Register(*m->registry_)
      .Add({{"component", component}, {"version", kVersion}})
      .Set(1);
  m->exposer_->RegisterCollectable(m->registry_);
  return m;
}

MetricsExposer::~MetricsExposer() = default;

}  // namespace petra::metrics

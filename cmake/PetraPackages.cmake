# Finds every package the build links. The GPU hosts have none of Debian's
# -dev packages installed: scripts/gpu/build.sh unpacks them into a prefix
# (CMAKE_PREFIX_PATH=<prefix>/usr) beside a pip torch. Three of their CMake
# files assume they live in /usr or that nothing else defined their targets
# first; each lookup below works from any prefix and changes nothing where the
# packages are installed (the Debian machines, CI). scripts/gpu/check-prefix.sh
# checks them on a Debian machine with /usr's copies hidden.

# Debian keeps a few headers under include/<multiarch> (OpenSSL's
# opensslconf.h, libjpeg-turbo's jconfig.h), which the compiler searches by
# itself only in /usr: a prefix's must be named.
foreach(_petra_prefix IN LISTS CMAKE_PREFIX_PATH)
  set(_petra_arch_include "${_petra_prefix}/include/${CMAKE_LIBRARY_ARCHITECTURE}")
  if(CMAKE_LIBRARY_ARCHITECTURE AND IS_DIRECTORY "${_petra_arch_include}"
     AND NOT _petra_prefix MATCHES "^/usr/?$")
    include_directories(SYSTEM "${_petra_arch_include}")
  endif()
endforeach()

# Protobuf before Torch: a pip torch links its own protobuf statically, and
# its Caffe2Config.cmake then defines protobuf::libprotobuf as an empty alias
# unless the target exists already, which left every binary without
# libprotobuf (about 700 undefined symbols at link time).
find_package(Protobuf REQUIRED)
find_package(Torch REQUIRED)
get_target_property(_petra_protobuf_alias protobuf::libprotobuf ALIASED_TARGET)
if(_petra_protobuf_alias)
  message(FATAL_ERROR "protobuf::libprotobuf is an alias of "
    "'${_petra_protobuf_alias}' (Torch's config made it), not the library "
    "found by find_package(Protobuf): nothing would link libprotobuf")
endif()
# libtorch 2.12 and later stop at "C++20 or later compatible compiler is
# required to use ATen". Debian's (1.13) and the GPU machine's (2.11) take
# the house standard, C++17.
if(Torch_VERSION VERSION_GREATER_EQUAL 2.12)
  set(CMAKE_CXX_STANDARD 20)
  message(STATUS "PETRA fleet: libtorch ${Torch_VERSION} needs C++20")
endif()

# gRPC's Findre2.cmake takes RE2 from pkg-config as a bare -lre2, whose
# library directory is the .pc file's /usr: "cannot find -lre2" when the
# library is in a prefix. A target with the library's full path, made first,
# is what gRPC's config then uses.
if(NOT TARGET re2::re2)
  find_library(PETRA_RE2_LIBRARY re2)
  find_path(PETRA_RE2_INCLUDE_DIR re2/re2.h)
  if(PETRA_RE2_LIBRARY AND PETRA_RE2_INCLUDE_DIR)
    add_library(re2::re2 UNKNOWN IMPORTED)
    set_target_properties(re2::re2 PROPERTIES
      IMPORTED_LOCATION "${PETRA_RE2_LIBRARY}"
      INTERFACE_INCLUDE_DIRECTORIES "${PETRA_RE2_INCLUDE_DIR}"
      INTERFACE_LINK_LIBRARIES Threads::Threads)
    set(re2_FOUND TRUE)
  endif()
endif()
find_package(gRPC CONFIG REQUIRED)
find_package(absl CONFIG REQUIRED)
# YAML job specs (services/job/yaml_to_json.cc). yaml-cpp 0.7 (Debian 12)
# names its target yaml-cpp; 0.8 names it yaml-cpp::yaml-cpp.
find_package(yaml-cpp CONFIG REQUIRED)
if(TARGET yaml-cpp::yaml-cpp)
  set(PETRA_YAML yaml-cpp::yaml-cpp)
else()
  set(PETRA_YAML yaml-cpp)
endif()

# glog's config loads FindUnwind.cmake from the absolute
# /usr/share/glog/cmake; in a prefix it is under <prefix>/share/glog/cmake.
foreach(_petra_prefix IN LISTS CMAKE_PREFIX_PATH)
  if(EXISTS "${_petra_prefix}/share/glog/cmake/FindUnwind.cmake")
    list(APPEND CMAKE_MODULE_PATH "${_petra_prefix}/share/glog/cmake")
    break()
  endif()
endforeach()
# The servers' event log (services/base/event_log.h); Debian's libtorch
# brings it too.
find_package(glog CONFIG REQUIRED)
find_package(prometheus-cpp CONFIG REQUIRED)
# The /metrics endpoint's HTTP server (services/metrics/metrics_exposer.cc).
find_package(civetweb CONFIG REQUIRED)
find_package(OpenSSL REQUIRED)

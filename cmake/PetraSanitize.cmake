# PETRA_SANITIZE: build every target of this project with GCC/Clang
# sanitizers, e.g. -DPETRA_SANITIZE=address,undefined (scripts/soak.sh uses
# it for build-asan). Empty (the default) adds nothing.
#
# The flags are added with add_compile_options/add_link_options before any
# target exists (this file is included ahead of cmake/PetraTorch.cmake), so
# the torch precompiled header (petra_torch_pch) is compiled with exactly the
# flags of the targets that REUSE_FROM it; a PCH built without -fsanitize
# would be rejected by GCC ("created by a different GCC executable or with
# different options") and silently ignored or fail the build.
#
# Undefined behaviour aborts instead of printing and going on
# (-fno-sanitize-recover), so a soak or test cannot pass with a report in its
# log. Third-party libraries (libtorch, gRPC, protobuf) are Debian's and
# stay uninstrumented: ASan still sees their heap through the interposed
# malloc/free, but not their internal out-of-bounds accesses.
set(PETRA_SANITIZE "" CACHE STRING
    "Sanitizers for every target: empty (off) or a -fsanitize= list such as address,undefined")

if(PETRA_SANITIZE)
  if(NOT PETRA_SANITIZE MATCHES "^[a-z,-]+$")
    message(FATAL_ERROR
      "PETRA_SANITIZE='${PETRA_SANITIZE}': expected a comma-separated "
      "-fsanitize= list such as address,undefined")
  endif()
  set(_petra_sanitize_flags -fsanitize=${PETRA_SANITIZE} -fno-omit-frame-pointer)
  if(PETRA_SANITIZE MATCHES "undefined")
    list(APPEND _petra_sanitize_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options(${_petra_sanitize_flags})
  add_link_options(${_petra_sanitize_flags})
  message(STATUS "PETRA fleet: sanitizers ${PETRA_SANITIZE}")
endif()

# petra_use_torch(<target>): link libtorch and, for torch-heavy targets, reuse
# one precompiled header so each translation unit does not re-parse
# <torch/torch.h> (~20 s and 1.5 GB each).
set(PETRA_TORCH_PCH ${CMAKE_SOURCE_DIR}/services/torch_pch.h)

# One target owns the PCH; the others reuse it (compile flags must match).
add_library(petra_torch_pch STATIC ${CMAKE_SOURCE_DIR}/services/torch_pch.cc)
target_link_libraries(petra_torch_pch PUBLIC ${TORCH_LIBRARIES})
if(PETRA_USE_PCH)
  target_precompile_headers(petra_torch_pch PRIVATE ${PETRA_TORCH_PCH})
endif()

function(petra_use_torch target)
  target_link_libraries(${target} PRIVATE ${TORCH_LIBRARIES})
  if(PETRA_USE_PCH)
    target_precompile_headers(${target} REUSE_FROM petra_torch_pch)
  endif()
endfunction()

# Every program lists the C++ runtime first among the libraries it needs. A
# pip wheel's libtorch.so carries and exports its own copy of parts of
# libstdc++ (64 std::filesystem functions in torch 2.11.0+cu130), and the
# dynamic linker binds each symbol to the first library in that list that
# defines it: with libtorch.so first, our std::filesystem::remove_all ran
# the wheel's, which called through a null pointer, and every fleet run on
# the first GPU hosts crashed (docs/GPU.md, 2026-11-27). Listed first,
# libstdc++'s own definitions win for the whole process, libtorch's
# included. tests/cmake/check_needed_order.sh checks the order.
# One SHELL: group, which CMake neither de-duplicates nor splits: as three
# options it worked with Debian's CMake and gcc, yet on the GPU host of
# 2026-11-28 (CMake 4.4, Ubuntu's gcc, which links --as-needed by default)
# libstdc++ was not first, and the wheel's remove_all crashed again.
add_link_options(
  "SHELL:-Wl,--push-state,--no-as-needed -lstdc++ -Wl,--pop-state")

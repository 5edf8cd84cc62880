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

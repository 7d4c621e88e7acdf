# qwen35_layer(NAME [DEPS layer...]) builds src/NAME/**/*.cc into the static library qwen35_NAME.
#
# Layering is enforced with per-target include views: build/layer_views/<target>/ holds one
# symlink per layer the target may see (itself and its DEPS, transitively). Headers are included as
# "layer/file.h" and the only include root a target gets is its view, so including a header of a
# layer above (or beside) it fails to compile.
set(QWEN35_VIEWS_DIR ${CMAKE_BINARY_DIR}/layer_views)

function(qwen35_make_view view_name)
  set(dir ${QWEN35_VIEWS_DIR}/${view_name})
  file(MAKE_DIRECTORY ${dir})
  foreach(layer IN LISTS ARGN)
    if(layer STREQUAL "tools")
      set(target_dir ${PROJECT_SOURCE_DIR}/tools)
    else()
      set(target_dir ${PROJECT_SOURCE_DIR}/src/${layer})
    endif()
    if(layer STREQUAL "kernels" AND view_name STREQUAL "model")
      # model/ sees only the op interface of the kernels (with the rotary rule and the KV cache
      # formats it states), never a concrete backend.
      file(MAKE_DIRECTORY ${dir}/kernels)
      foreach(h ops.h rope.h kv_format.h)
        if(NOT EXISTS ${dir}/kernels/${h})
          file(CREATE_LINK ${target_dir}/${h} ${dir}/kernels/${h} SYMBOLIC)
        endif()
      endforeach()
    elseif(NOT EXISTS ${dir}/${layer})
      file(CREATE_LINK ${target_dir} ${dir}/${layer} SYMBOLIC)
    endif()
  endforeach()
  set(QWEN35_VIEW_DIR ${dir} PARENT_SCOPE)
endfunction()

function(qwen35_layer name)
  cmake_parse_arguments(L "" "" "DEPS" ${ARGN})
  set(all ${name})
  foreach(d IN LISTS L_DEPS)
    get_property(dd GLOBAL PROPERTY QWEN35_LAYER_${d}_ALL)
    list(APPEND all ${dd})
  endforeach()
  list(REMOVE_DUPLICATES all)
  set_property(GLOBAL PROPERTY QWEN35_LAYER_${name}_ALL ${all})
  file(GLOB_RECURSE srcs CONFIGURE_DEPENDS ${PROJECT_SOURCE_DIR}/src/${name}/*.cc)
  add_library(qwen35_${name} STATIC ${srcs})
  qwen35_unity(qwen35_${name})
  qwen35_make_view(${name} ${all})
  target_include_directories(qwen35_${name} PRIVATE ${QWEN35_VIEW_DIR})
  foreach(d IN LISTS L_DEPS)
    target_link_libraries(qwen35_${name} PUBLIC qwen35_${d})
  endforeach()
endfunction()

# Unity builds (QWEN35_UNITY, on by default; -DQWEN35_UNITY=OFF for one unit per file): a
# library's files (and the CLI's, src/cli/CMakeLists.txt) compile in batches of QWEN35_UNITY_BATCH, so each batch parses the heavy headers
# (nlohmann/json, Boost.Beast) and emits their template code once, not once per file. The kernels
# stay one file per unit (Highway's per-target re-inclusion, foreach_target.h, cannot share one),
# as does the small Vulkan layer with its generated shader table. A file with its own compile
# options (the matmuls, the fuzz coverage files, gguf_encode.cc) is left out of batches by CMake.
option(QWEN35_UNITY "Compile the libraries in unity batches" ON)
set(QWEN35_UNITY_BATCH 8 CACHE STRING "files per unity batch")
function(qwen35_unity target)
  if(QWEN35_UNITY AND NOT target MATCHES "^qwen35_(kernels|vulkan)$")
    set_target_properties(${target} PROPERTIES UNITY_BUILD ON
                          UNITY_BUILD_BATCH_SIZE ${QWEN35_UNITY_BATCH})
  endif()
endfunction()
# Files that define a file-local name another file of their library defines too (a unit of their
# own each; a new clash shows as a redefinition or ambiguity error in a unity batch).
set_source_files_properties(src/runtime/prefix_cache_file.cc src/server/utility_routes.cc
                            src/server/http_server.cc
                            PROPERTIES SKIP_UNITY_BUILD_INCLUSION ON)

# Give a consumer (cli, tools, tests) a view over the named layers.
function(qwen35_use target)
  set(all)
  foreach(d IN LISTS ARGN)
    get_property(dd GLOBAL PROPERTY QWEN35_LAYER_${d}_ALL)
    if(NOT dd)
      set(dd ${d})
    endif()
    list(APPEND all ${dd})
  endforeach()
  list(REMOVE_DUPLICATES all)
  qwen35_make_view(use_${target} ${all})
  target_include_directories(${target} PRIVATE ${QWEN35_VIEW_DIR})
endfunction()

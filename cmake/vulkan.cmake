# The Vulkan backend (docs/design.md "Vulkan backend"): the layer src/vulkan/ and its compute
# shaders, compiled to SPIR-V by glslc at build time and embedded into the binary. Built where the
# Vulkan headers (libvulkan-dev) and glslc are found (scripts/setup installs both); elsewhere it is
# left out and `--device vulkan` says so. The binary never links libvulkan: the loader is opened at
# run time (vulkan/loader.h), so it starts on a machine without one.
option(QWEN35_VULKAN "Build the Vulkan backend where its headers and glslc are found" ON)
set(QWEN35_HAVE_VULKAN OFF)
if(QWEN35_VULKAN)
  find_path(QWEN35_VULKAN_INCLUDE vulkan/vulkan.h)
  find_program(QWEN35_GLSLC glslc)
  if(QWEN35_VULKAN_INCLUDE AND QWEN35_GLSLC)
    set(QWEN35_HAVE_VULKAN ON)
  else()
    message(STATUS "Vulkan backend left out: needs the Vulkan headers (libvulkan-dev) and glslc "
                   "(scripts/setup installs them)")
  endif()
endif()

if(QWEN35_HAVE_VULKAN)
  qwen35_layer(vulkan DEPS core kernels)
  target_include_directories(qwen35_vulkan SYSTEM PUBLIC ${QWEN35_VULKAN_INCLUDE})
  # Function pointers only (vulkan/api.h): no prototype can bind the binary to libvulkan.
  target_compile_definitions(qwen35_vulkan PUBLIC VK_NO_PROTOTYPES QWEN35_HAVE_VULKAN=1)
  target_link_libraries(qwen35_vulkan PRIVATE ${CMAKE_DL_LIBS})

  # Shaders: src/vulkan/shaders/NAME.comp is compiled once as NAME, or once per variant where
  # QWEN35_VK_VARIANTS_NAME lists "variant|-DDEFINE|..." entries (the weight types of one source).
  set(vk_types "f32|-DW_F32" "f16|-DW_F16" "bf16|-DW_BF16" "affine|-DW_AFFINE" "q8_0|-DW_Q8_0"
      "q4_0|-DW_Q4_0" "q4_1|-DW_Q4_1" "q5_0|-DW_Q5_0" "q5_1|-DW_Q5_1" "iq4_nl|-DW_IQ4_NL"
      "q4_k|-DW_Q4_K" "q5_k|-DW_Q5_K" "q6_k|-DW_Q6_K" "iq4_xs|-DW_IQ4_XS"
      "q2_k|-DW_Q2_K" "q3_k|-DW_Q3_K" "iq2_xxs|-DW_IQ2_XXS" "iq2_xs|-DW_IQ2_XS"
      "iq3_xxs|-DW_IQ3_XXS" "iq3_s|-DW_IQ3_S")
  foreach(name matmul embed)
    set(QWEN35_VK_VARIANTS_${name})
    foreach(t IN LISTS vk_types)
      list(APPEND QWEN35_VK_VARIANTS_${name} "${name}_${t}")
    endforeach()
  endforeach()
  # The MoE experts' matmul: the same source over routed slots (-DINDEXED); and for calls of a
  # few token rows, 64 weight rows a workgroup (-DGEMV).
  foreach(t IN LISTS vk_types)
    list(APPEND QWEN35_VK_VARIANTS_matmul "matmul_id_${t}|-DINDEXED" "matmulv_${t}|-DGEMV")
  endforeach()

  set(vk_src ${PROJECT_SOURCE_DIR}/src/vulkan/shaders)
  set(vk_out ${CMAKE_BINARY_DIR}/generated/spirv)
  file(MAKE_DIRECTORY ${vk_out})
  file(GLOB vk_shaders CONFIGURE_DEPENDS ${vk_src}/*.comp)
  set(vk_entries)
  set(vk_spv)
  foreach(src IN LISTS vk_shaders)
    get_filename_component(base ${src} NAME_WE)
    set(variants ${QWEN35_VK_VARIANTS_${base}})
    if(NOT variants)
      set(variants "${base}|")
    endif()
    foreach(v IN LISTS variants)
      string(REPLACE "|" ";" parts "${v}")
      list(GET parts 0 vname)
      list(LENGTH parts np)
      set(defs)
      if(np GREATER 1)
        list(SUBLIST parts 1 -1 defs)
      endif()
      set(spv ${vk_out}/${vname}.spv)
      # Vulkan 1.1 SPIR-V: every device we accept takes it (vulkan/device_info.h).
      add_custom_command(
        OUTPUT ${spv}
        COMMAND ${QWEN35_GLSLC} --target-env=vulkan1.1 -O -Werror -I ${vk_src} ${defs}
                -MD -MF ${spv}.d -o ${spv} ${src}
        DEPENDS ${src}
        DEPFILE ${spv}.d
        COMMENT "glslc ${vname}"
        VERBATIM)
      list(APPEND vk_entries "${vname}|${spv}")
      list(APPEND vk_spv ${spv})
    endforeach()
  endforeach()

  set(vk_list ${CMAKE_BINARY_DIR}/generated/vulkan_shaders.txt)
  set(vk_cc ${CMAKE_BINARY_DIR}/generated/vulkan_shaders.cc)
  string(REPLACE ";" "\n" vk_lines "${vk_entries}")
  file(CONFIGURE OUTPUT ${vk_list} CONTENT "${vk_lines}\n" @ONLY)
  add_custom_command(
    OUTPUT ${vk_cc}
    COMMAND ${CMAKE_COMMAND} -DOUT=${vk_cc} -DLIST=${vk_list} -DHEADER=vulkan/shaders.h
            -DNAMESPACE=qwen35::vulkan -DTYPE=EmbeddedShader -DFUNC=embedded_shaders
            "-DORIGIN=the SPIR-V of src/vulkan/shaders/"
            -P ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
    DEPENDS ${vk_spv} ${vk_list} ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
    COMMENT "Embedding the Vulkan shaders"
    VERBATIM)
  target_sources(qwen35_vulkan PRIVATE ${vk_cc})
endif()

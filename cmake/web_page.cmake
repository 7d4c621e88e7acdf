# The web chat page (docs/design.md, "The web chat page"): its own files in src/server/web/ and
# the JavaScript libraries of three Debian packages, embedded into qwen35_server at build time
# so that `qwen35 serve` needs no network and no files beside the binary. The libraries are
# read from the installed packages (scripts/setup installs them), never copied into the repository.
set(QWEN35_WEB_SRC ${PROJECT_SOURCE_DIR}/src/server/web)
file(GLOB web_own LIST_DIRECTORIES false CONFIGURE_DEPENDS ${QWEN35_WEB_SRC}/*)

# url name -> Debian file. The paths can be overridden for other distributions (-DQWEN35_...).
set(QWEN35_MARKED_JS /usr/share/javascript/marked/marked.min.js
    CACHE FILEPATH "marked (Debian libjs-marked)")
set(QWEN35_HIGHLIGHT_JS /usr/share/javascript/highlight.js/highlight.min.js
    CACHE FILEPATH "highlight.js (Debian libjs-highlight.js)")
set(QWEN35_HIGHLIGHT_STYLES /usr/share/javascript/highlight.js/styles
    CACHE PATH "highlight.js styles (Debian libjs-highlight.js)")
set(QWEN35_PURIFY_JS /usr/share/nodejs/dompurify/dist/purify.min.js
    CACHE FILEPATH "DOMPurify (Debian node-dompurify)")
set(web_libs
    "lib/marked.min.js|${QWEN35_MARKED_JS}"
    "lib/highlight.min.js|${QWEN35_HIGHLIGHT_JS}"
    "lib/hljs-light.css|${QWEN35_HIGHLIGHT_STYLES}/github.css"
    "lib/hljs-dark.css|${QWEN35_HIGHLIGHT_STYLES}/atom-one-dark.css"
    "lib/purify.min.js|${QWEN35_PURIFY_JS}")

set(web_entries)
set(web_deps ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake)
foreach(f IN LISTS web_own)
  get_filename_component(name ${f} NAME)
  list(APPEND web_entries "${name}|${f}")
  list(APPEND web_deps ${f})
endforeach()
foreach(entry IN LISTS web_libs)
  string(REPLACE "|" ";" parts "${entry}")
  list(GET parts 1 path)
  if(NOT EXISTS ${path})
    message(FATAL_ERROR "web page: ${path} is missing; install libjs-marked, libjs-highlight.js "
                        "and node-dompurify (scripts/setup does)")
  endif()
  list(APPEND web_entries "${entry}")
  list(APPEND web_deps ${path})
endforeach()

# The list goes through a file: a ';'-list does not survive a custom command's arguments.
set(web_out ${CMAKE_BINARY_DIR}/generated/web_files.cc)
set(web_list ${CMAKE_BINARY_DIR}/generated/web_files.txt)
string(REPLACE ";" "\n" web_lines "${web_entries}")
file(CONFIGURE OUTPUT ${web_list} CONTENT "${web_lines}\n" @ONLY)
add_custom_command(
  OUTPUT ${web_out}
  COMMAND ${CMAKE_COMMAND} -DOUT=${web_out} -DLIST=${web_list}
          -P ${PROJECT_SOURCE_DIR}/cmake/embed_files.cmake
  DEPENDS ${web_deps} ${web_list}
  COMMENT "Embedding the web chat page"
  VERBATIM)
target_sources(qwen35_server PRIVATE ${web_out})

# src/git_describe.cmake — run at every build (CMakeLists.txt, target qf_git): writes OUT (qf_git.h) with
# `git describe --always --dirty --tags` of SRC, touching the file only when the text changes.
set(desc "unknown (not a git checkout)")
if(GIT AND EXISTS "${SRC}/.git")
  execute_process(COMMAND "${GIT}" describe --always --dirty --tags WORKING_DIRECTORY "${SRC}"
    OUTPUT_VARIABLE out OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET RESULT_VARIABLE rc)
  if(rc EQUAL 0 AND out)
    set(desc "${out}")
  endif()
endif()
set(text "/* generated at build time by src/git_describe.cmake */\n#define QWENFT_GIT_DESCRIBE \"${desc}\"\n")
if(EXISTS "${OUT}")
  file(READ "${OUT}" old)
endif()
if(NOT old STREQUAL text)
  file(WRITE "${OUT}" "${text}")
endif()

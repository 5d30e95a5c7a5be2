# Runs `sieve info` on one broken GGUF file and checks it fails with the
# message expected.txt lists for it.
#   cmake -DSIEVE=path/to/sieve -DFILE=dir/x.gguf -DMANIFEST=dir/expected.txt -P check_broken.cmake
# The manifest is searched as plain text (no CMake lists) because expected
# messages contain brackets, which CMake list handling would misread.
get_filename_component(name "${FILE}" NAME)
file(READ "${MANIFEST}" manifest)
string(FIND "${manifest}" "\n${name}\t" at)
if(at EQUAL -1)
  message(FATAL_ERROR "${name} is not listed in ${MANIFEST}")
endif()
string(SUBSTRING "${manifest}" ${at} -1 rest)
string(SUBSTRING "${rest}" 1 -1 rest)
string(FIND "${rest}" "\n" eol)
string(SUBSTRING "${rest}" 0 ${eol} line)
string(FIND "${line}" "\t" t1 REVERSE)
math(EXPR t1 "${t1} + 1")
string(SUBSTRING "${line}" ${t1} -1 expect)

execute_process(COMMAND "${SIEVE}" info "${FILE}"
                RESULT_VARIABLE rc OUTPUT_VARIABLE out ERROR_VARIABLE err)
if(rc EQUAL 0)
  message(FATAL_ERROR "sieve info ${name} exited 0; expected a failure with: ${expect}\nstdout:\n${out}")
endif()
string(FIND "${err}" "${expect}" found)
if(found EQUAL -1)
  message(FATAL_ERROR "sieve info ${name} (exit ${rc}): stderr lacks \"${expect}\"\nstderr:\n${err}")
endif()

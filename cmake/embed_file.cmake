# Turns a file into a C++ source that defines it as a std::string_view, so the
# binary carries it (no file to install beside it, no #embed needed):
#
#   cmake -DIN=page.html -DOUT=page.cpp -DHEADER=sieve/server/chat_page.h \
#         -DNAMESPACE=sieve -DNAME=chat_page_html -P embed_file.cmake
#
# defines `const std::string_view NAMESPACE::NAME` (the bytes) and
# `NAMESPACE::NAME_etag` (W/"first 16 hex digits of the SHA-256"), both
# declared extern in HEADER. Every byte is written as a \xNN escape, so the
# file's content never needs quoting and no byte can end an escape early.
foreach(var IN ITEMS IN OUT HEADER NAMESPACE NAME)
  if(NOT DEFINED ${var})
    message(FATAL_ERROR "embed_file.cmake: -D${var}=... is required")
  endif()
endforeach()

file(READ "${IN}" hex HEX)
file(SHA256 "${IN}" sha)
string(SUBSTRING "${sha}" 0 16 sha16)
# 32 bytes (64 hex digits) per line, then each byte as \xNN, each line quoted.
# (CMake's regular expressions have no {n}.)
string(REPEAT "[0-9a-f]" 64 line_re)
string(REGEX REPLACE "(${line_re})" "\\1\n" hex "${hex}")
string(REGEX REPLACE "([0-9a-f][0-9a-f])" "\\\\x\\1" body "${hex}")
string(REGEX REPLACE "\n$" "" body "${body}")
string(REPLACE "\n" "\"\n    \"" body "${body}")
get_filename_component(in_name "${IN}" NAME)

file(WRITE "${OUT}"
"// Generated from ${in_name} by cmake/embed_file.cmake; edit the source file, not this one.
#include \"${HEADER}\"

namespace ${NAMESPACE} {
namespace {
constexpr char ${NAME}_bytes[] =
    \"${body}\";
}  // namespace

const std::string_view ${NAME}(${NAME}_bytes, sizeof(${NAME}_bytes) - 1);
const std::string_view ${NAME}_etag = \"W/\\\"${sha16}\\\"\";

}  // namespace ${NAMESPACE}
")

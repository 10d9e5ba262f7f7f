# Sanitizers and fuzzing (README, "Fuzzing and sanitizers"). SPILLWAY_SANITIZE instruments all host
# code: "address,undefined" (ASan + UBSan, every report fatal) or "thread" (TSan). SPILLWAY_FUZZ
# (clang) adds libFuzzer's coverage instrumentation and builds tests/fuzz, one target per reader of
# untrusted input, run for a short time each by `ctest -L fuzz`; it implies address,undefined unless
# SPILLWAY_SANITIZE says otherwise. Both leave the CUDA backend out: nvcc's device code is not
# instrumented, and the module is loaded with dlopen into an instrumented process.
set(SPILLWAY_SANITIZE "" CACHE STRING "Sanitizers for the host code: address,undefined or thread (empty: none)")
option(SPILLWAY_FUZZ "Build the libFuzzer targets of tests/fuzz (needs clang)" OFF)
set(SPILLWAY_FUZZ_SECONDS 20 CACHE STRING "How long `ctest -L fuzz` runs each fuzz target")
set(spillway_sanitize "${SPILLWAY_SANITIZE}")
if(SPILLWAY_FUZZ)
  if(NOT CMAKE_CXX_COMPILER_ID MATCHES "Clang")
    message(FATAL_ERROR "SPILLWAY_FUZZ needs clang's libFuzzer: configure with "
                        "-DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++")
  endif()
  if(spillway_sanitize STREQUAL "")
    set(spillway_sanitize address,undefined)
  endif()
endif()
if(NOT spillway_sanitize STREQUAL "")
  if(NOT spillway_sanitize MATCHES "^(address|undefined|address,undefined|undefined,address|thread)$")
    message(FATAL_ERROR "SPILLWAY_SANITIZE: address,undefined, address, undefined or thread, "
                        "not '${spillway_sanitize}'")
  endif()
  set(SPILLWAY_CUDA OFF)
  # Line tables keep the reports' stack traces readable at a small cost in build time.
  set(san_flags -fsanitize=${spillway_sanitize} -fno-omit-frame-pointer -g1)
  if(spillway_sanitize MATCHES "undefined")
    list(APPEND san_flags -fno-sanitize-recover=undefined)
  endif()
  add_compile_options("$<$<COMPILE_LANGUAGE:C,CXX>:${san_flags}>")
  add_link_options(-fsanitize=${spillway_sanitize})
endif()
if(SPILLWAY_FUZZ)
  add_compile_options($<$<COMPILE_LANGUAGE:C,CXX>:-fsanitize=fuzzer-no-link>)
endif()

# Tests of the control-protocol codec (common/ft_wire.c).
ft_add_test(NAME test_wire SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_wire.c
            LIBS ftcommon LABELS unit TIMEOUT 300)

# libFuzzer harness: only with clang, and only where -fsanitize=fuzzer links.
# Not a CTest test; run by hand: build/tests/fuzz_wire -max_total_time=60
if(CMAKE_C_COMPILER_ID STREQUAL "Clang")
  include(CheckCSourceCompiles)
  set(CMAKE_REQUIRED_FLAGS "-fsanitize=fuzzer")
  check_c_source_compiles(
    "#include <stdint.h>\n#include <stddef.h>\nint LLVMFuzzerTestOneInput(const uint8_t *d, size_t n) { return 0; }"
    FT_HAVE_LIBFUZZER)
  unset(CMAKE_REQUIRED_FLAGS)
  if(FT_HAVE_LIBFUZZER)
    # ft_wire.c is compiled into the harness itself so that it is instrumented.
    add_executable(fuzz_wire ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_wire.c
                   ${CMAKE_SOURCE_DIR}/common/ft_wire.c ${CMAKE_SOURCE_DIR}/common/ft_err.c)
    target_include_directories(fuzz_wire PRIVATE ${CMAKE_SOURCE_DIR}/common)
    target_compile_options(fuzz_wire PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_options(fuzz_wire PRIVATE -fsanitize=fuzzer,address,undefined)
    target_link_libraries(fuzz_wire PRIVATE PkgConfig::OPENSSL)
    set_target_properties(fuzz_wire PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/tests)
  endif()
endif()

# libFuzzer targets: every tests/fuzz/fuzz_NAME.c becomes build/fuzz/fuzz_NAME,
# only when configured with -DFT_FUZZ=ON and clang (scripts/fuzz.sh does
# both, in its own build directory). Not CTest tests: scripts/fuzz.sh runs
# them over tests/fuzz/seeds/NAME/ after replaying tests/fuzz/crashers/NAME/.
#
# Under FT_FUZZ the project's libraries a harness may call are compiled with
# -fsanitize=fuzzer-no-link,address,undefined (coverage for libFuzzer, ASan and
# UBSan inside the parsers, not only in the harness), and every harness is
# compiled and linked with -fsanitize=fuzzer,address,undefined against all of
# them. The target `fuzz_all` builds the harnesses and what they need, nothing
# else (no programs, no CUDA, no cuemu).
option(FT_FUZZ "Build the libFuzzer targets in tests/fuzz (clang only)" OFF)
if(NOT FT_FUZZ)
  return()
endif()
if(NOT CMAKE_C_COMPILER_ID STREQUAL "Clang")
  message(FATAL_ERROR "FT_FUZZ=ON needs clang (CC=clang CXX=clang++; scripts/fuzz.sh sets them)")
endif()

set(FT_FUZZ_SAN -fsanitize=address,undefined -fno-sanitize-recover=undefined
                -fno-omit-frame-pointer)
# The libraries a harness may link, in link order; those not configured here
# (a dependency missing) are left out.
set(FT_FUZZ_LIBS)
foreach(lib ftckpt ftwatchdog ft_datatest ftcommon)
  if(TARGET ${lib})
    target_compile_options(${lib} PRIVATE -fsanitize=fuzzer-no-link ${FT_FUZZ_SAN})
    list(APPEND FT_FUZZ_LIBS ${lib})
  endif()
endforeach()

file(GLOB FT_FUZZ_SRC CONFIGURE_DEPENDS ${CMAKE_CURRENT_SOURCE_DIR}/fuzz/fuzz_*.c)
list(SORT FT_FUZZ_SRC)
add_custom_target(fuzz_all)
foreach(src ${FT_FUZZ_SRC})
  get_filename_component(name ${src} NAME_WE)
  add_executable(${name} ${src})
  target_compile_options(${name} PRIVATE -fsanitize=fuzzer ${FT_FUZZ_SAN})
  target_link_options(${name} PRIVATE -fsanitize=fuzzer ${FT_FUZZ_SAN})
  target_link_libraries(${name} PRIVATE ${FT_FUZZ_LIBS})
  set_target_properties(${name} PROPERTIES RUNTIME_OUTPUT_DIRECTORY ${CMAKE_BINARY_DIR}/fuzz)
  add_dependencies(fuzz_all ${name})
endforeach()
message(STATUS "fuzz targets: ${FT_FUZZ_SRC}")

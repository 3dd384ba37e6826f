# Tests of the control-protocol codec (common/ft_wire.c).
ft_add_test(NAME test_wire SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_wire.c
            LIBS ftcommon LABELS unit TIMEOUT 300)
# Its libFuzzer harness (tests/fuzz/fuzz_wire.c) is built by tests/fuzz.cmake
# (-DFT_FUZZ=ON) and run by scripts/fuzz.sh.

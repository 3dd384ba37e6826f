# ft_runfile (common/ft_runfile.c): the run file parser against the sample
# files in tests/data/runfiles/.
ft_add_test(NAME test_runfile
            SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_runfile.c
            LIBS ftcommon
            LABELS unit
            TIMEOUT 60)

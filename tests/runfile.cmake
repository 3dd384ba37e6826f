# ft_runfile (common/ft_runfile.c): the run file parser against the sample
# files in tests/data/runfiles/.
ft_add_test(NAME test_runfile
            SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_runfile.c
            LIBS ftcommon
            LABELS unit
            TIMEOUT 60)
# No string comparison of a run-file value outside common/ft_runfile.c
# (issue 40): its words and booleans are parsed there once, into enums and
# bools; fails naming FILE:LINE of each strcmp on one.
find_program(FT_PYTHON3 python3)
if(FT_PYTHON3)
  ft_add_script_test(NAME runfile_typed LABELS unit TIMEOUT 30
                     COMMAND ${FT_PYTHON3} ${CMAKE_CURRENT_SOURCE_DIR}/unit/runfile_typed.py)
endif()

# The checkpoint store's one key set (ckptstore/ckpt_hashset.c).
if(TARGET ftckpt)
  ft_add_test(NAME test_ckpt_hashset SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/unit/test_ckpt_hashset.c
              LIBS ftckpt LABELS unit TIMEOUT 60)
endif()

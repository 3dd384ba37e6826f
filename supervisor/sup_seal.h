/*
 * sup_seal.h: the state of the run file's seal and of the generation floor
 * (sup_seal.c owns it; struct sup holds it as s->seal). The calls are in
 * sup_int.h (layer 1); sup_seal.c says what the seal and the floor promise.
 * sup_main.c reads sha256 and accepted for the run_started and
 * runfile_change_accepted events. Single-threaded: the loop's, except
 * gen_filed, which is the record lane's once the loop runs.
 */
#ifndef SUP_SEAL_H
#define SUP_SEAL_H

#include <stdint.h>

typedef struct sup_seal_state {
  /* the run file's snapshot, sealed at start: its SHA-256 ("" none), its
   * config JSON (malloc'd), and what an accepted change changed */
  char sha256[65];
  char *config;
  char accepted[1024];
  uint64_t gen_filed; /* the generation floor DIR/generation holds */
} sup_seal_state;

#endif

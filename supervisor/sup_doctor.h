/*
 * sup_doctor.h: the state of the node doctor's verdicts (sup_doctor.c owns
 * it; struct sup holds it as s->doctor; each worker's own verdict is in its
 * sup_worker: doctor, dhash, dplat). The calls are in sup_int.h (layer 3).
 * Nothing else touches it. Single-threaded: the loop's.
 */
#ifndef SUP_DOCTOR_H
#define SUP_DOCTOR_H

#define SUP_DOCTOR_MAX_PLATFORMS 16

typedef struct sup_doctor_state {
  /* the compute reference per platform: the hash two or more nodes agreed
   * on, and more nodes than on any other */
  struct {
    char plat[200];
    char hash[65];
  } refs[SUP_DOCTOR_MAX_PLATFORMS];
  int nrefs;
  double next_s; /* when idle spares are asked to check again (0: not yet set) */
} sup_doctor_state;

#endif

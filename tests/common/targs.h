/* targs: the start of a trainer test: MPI, then its config parsed as meshtrain parses its flags,
 * the test's own flags (its batch) first and its command line's (the mesh and the scheme) after,
 * so that they are validated against the test's batch; then the test's model shape. Bad flags end
 * the job with the message. Depends on mesh.h and config.h. */
#ifndef MT_TESTS_COMMON_TARGS_H
#define MT_TESTS_COMMON_TARGS_H
#include "train/config/config.h"

/* Collective over: world. mesh_mpi_init(argc, argv), then the defaults, the flags of `own`
 * (separated by spaces) and argv[1..*argc) (at most 62 words in all); then the model shape s,
 * one step, quick start. */
config targs_init(int *argc, char ***argv, const char *own, model_shape s);
#endif

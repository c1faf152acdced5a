/* outputs: the run's output paths checked before anything is written or trained. An output must
 * never name an input or another output, and must be writable where it is going (a directory that
 * exists, not a directory itself); a run that would fail to save at its end fails at its start.
 * Depends on config, ckpt (resolving --resume latest), data/h5util (file identity), mesh. */
#ifndef MT_TRAIN_CLI_OUTPUTS_H
#define MT_TRAIN_CLI_OUTPUTS_H
#include "mesh/mesh.h"
#include "train/config/config.h"

/* Collective over: world. Rank 0 checks --metrics, --save-init, --save-final and --trace against
 * the inputs (--data, --resume, resolved when `latest`) and each other, and that each can be
 * written, then takes each one's lock (data/lockfile.h: a second live run writing the same file
 * is refused, naming it); on a problem every rank leaves through mesh_exit_error with one
 * message. */
void outputs_check(const config *c, mesh *m);
#endif

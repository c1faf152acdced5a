/* disagg_cli: `serve --prefill-ranks N --prefill-tensor Yp`, disaggregated serving with each side
 * on a mesh of its own. The first N ranks prefill as N/Yp replicas of Yp tensor ranks (the mesh
 * "p=N/Yp,t=Yp", --tensor t); the others decode as --mesh, --tensor and --dp describe them. The
 * replicas are numbered prefill first, then decode, as the batcher's prefill_replicas wants; the
 * engines are linked over the world (engine_link) so that the KV blocks move by kv head between
 * the two shardings. Depends on engine, ckpt, mesh. */
#ifndef MT_TRAIN_SERVE_DISAGG_CLI_H
#define MT_TRAIN_SERVE_DISAGG_CLI_H
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/serve/batcher.h"
#include "train/serve/engine.h"

/* Collective over: world. Every rank's mesh (one axis over all), returned; this rank's side's
 * into *own. Bad input (Yp not dividing N, no rank left to decode, the decode ranks not fitting
 * --mesh) leaves through mesh_exit_error with one message. */
mesh *disagg_split(const config *c, int64_t nprefill, int64_t yp, mesh **own);

/* Not collective. The config of one side (prefill: the first nprefill ranks'): the model and
 * flags of c on the mesh disagg_split makes for it (the prefill side's "p=N/Yp,t=Yp", tensor t,
 * its data axes by default, the routed experts over p when c shards them (--expert) and p has
 * more than one replica; the decode side's c itself). */
void disagg_side_config(const config *c, int64_t nprefill, int64_t yp, int prefill, config *sc);

/* Collective over: world (w). This rank's side's engine on own (its parameters from ckpt, when
 * given; past K each side in the AllToAll kv layout, or replicated with kv_replicate), linked to
 * the other side's; o's replicas, prefill_replicas and prefill_shards set to both sides' (o's
 * shards must be the decode side's pools). Every failure is agreed over w, so both sides leave
 * together with one message. */
serve_engine *disagg_open(const config *c, mesh *w, mesh *own, int64_t nprefill, int64_t yp,
                          int kv_replicate, const char *ckpt, batch_opts *o);

/* Rank 0's start-up lines on stderr for o's prefill replicas (none without): which replicas
 * prefill and which decode and, with a prefill side of its own (yp > 0), each side's ranks and
 * tensor degree (e: this rank's engine). */
void disagg_print(const config *c, const batch_opts *o, const serve_engine *e, int64_t nprefill,
                  int64_t yp);
#endif

/* draft_cli: `meshtrain generate --draft CKPT --draft-tokens k`, speculative decoding (draft.h):
 * the drafter opened from its checkpoint on the target's mesh and sharding, both prefilled, the
 * rounds, and the report on stderr (rank 0): per sequence the drafted, kept and rejected tokens
 * and α; the median drafter and verify steps; then the summary: α, the tokens per target step
 * beside the book's (1 − α^(k+1))/(1 − α), the decode time per token, and the speed-up the
 * formula predicts from α and c = drafter step / verify step against a plain step as long as
 * the verify step (bench/spec_bench.sh measures the plain step too). Depends on draft, gen,
 * gen_cli, ckpt, mesh. */
#ifndef MT_TRAIN_INFER_DRAFT_CLI_H
#define MT_TRAIN_INFER_DRAFT_CLI_H
#include <stddef.h>
#include <stdint.h>

#include "mesh/mesh.h"
#include "train/config/config.h"
#include "train/infer/draft.h"
#include "train/infer/gen_cli.h"

/* Not collective (the same answer on every rank). The flags --draft and --draft-tokens against
 * the others: 0, or −1 with the reason in err. */
int draft_check(const config *c, const gen_flags *f, char *err, size_t errlen);
/* Collective over: world. The config of the drafter of checkpoint path for target config c:
 * c's mesh, sharding and sampling, the checkpoint's shape, which must have the target's
 * vocabulary, a context of at least `positions` (why_positions says whose: "this run needs
 * ..."), and no experts of a capacity. 0, or −1 with the reason in err. */
int draft_config(const config *c, mesh *m, const char *path, int64_t positions,
                 const char *why_positions, config *dc, char *err, size_t errlen);
/* Collective over: world. The drafter of checkpoint path for target config c, sharded as c
 * (mesh, --tensor, --dp), its shape entirely the checkpoint's: the same vocabulary as the target,
 * a context of at least d->S, kv heads not in the AllToAll layout. NULL with the reason in err
 * (the same on every rank). */
gen *draft_open(const config *c, mesh *m, const char *path, const gen_dims *d, char *err,
                size_t errlen);
/* Collective over: world. Prefill of target tg and drafter dg, then speculative rounds of k
 * drafted tokens until every local sequence has n tokens: mine[b·n + i]; the report on rank 0. */
void draft_tokens(const config *c, mesh *m, gen *tg, gen *dg, const prompt_set *ps, int64_t n,
                  int k, int32_t *mine);
#endif

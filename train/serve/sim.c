#define _POSIX_C_SOURCE 200809L /* getline */
/* sim: the batcher on a virtual clock priced by the book's roofline (see sim.h). */
#include "train/serve/sim.h"

#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mesh/errmsg.h"
#include "train/serve/cost.h"

typedef struct {
    double t_send, t_first, t_last;
    int32_t *prompt;
    int64_t plen, max_new, n_out;
    double *itl; /* [max_new] */
    int status;
} sim_req;

typedef struct {
    sim_req *r;
    double t; /* the virtual clock */
    int64_t done;
} sim_state;

static void free_reqs(sim_req *r, int64_t n) {
    for (int64_t i = 0; r && i < n; i++) free(r[i].prompt), free(r[i].itl);
    free(r);
}

/* One line of the workload into q. */
static int parse_line(const char *line, int64_t no, sim_req *q, char *err, size_t errlen) {
    json_error_t je;
    json_t *j = json_loads(line, 0, &je);
    json_t *t = json_object_get(j, "t"), *p = json_object_get(j, "prompt"),
           *mt = json_object_get(j, "max_tokens");
    int rc = 0;
    if (!j || !json_is_number(t) || !json_is_string(p) || !json_is_integer(mt) ||
        json_string_length(p) == 0 || json_integer_value(mt) < 1)
        rc = errmsg_fail(err, errlen,
                         "line %lld: expected {\"t\": seconds, \"prompt\": a non-empty string, "
                         "\"max_tokens\": an integer >= 1}",
                         (long long)no);
    if (rc == 0) {
        q->t_send = json_number_value(t);
        q->plen = (int64_t)json_string_length(p);
        q->max_new = json_integer_value(mt);
        q->prompt = malloc((size_t)q->plen * sizeof *q->prompt);
        q->itl = malloc((size_t)q->max_new * sizeof *q->itl);
        if (!q->prompt || !q->itl) rc = errmsg_fail(err, errlen, "out of memory");
        for (int64_t i = 0; rc == 0 && i < q->plen; i++)
            q->prompt[i] = (unsigned char)json_string_value(p)[i];
    }
    json_decref(j);
    return rc;
}

/* The workload's requests, in arrival order. */
static int load(const char *path, sim_req **out, int64_t *n, char *err, size_t errlen) {
    FILE *f = fopen(path, "r");
    if (!f) return errmsg_fail(err, errlen, "--simulate %s: cannot open it", path);
    char *line = NULL;
    size_t cap = 0;
    int64_t k = 0, room = 0;
    sim_req *r = NULL;
    int rc = 0;
    while (rc == 0 && getline(&line, &cap, f) > 0) {
        if (line[0] == '\n') continue;
        if (k == room) {
            sim_req *g = realloc(r, (size_t)(room = room ? 2 * room : 256) * sizeof *g);
            if (!g) {
                rc = errmsg_fail(err, errlen, "out of memory");
                break;
            }
            r = g;
        }
        memset(&r[k], 0, sizeof r[k]);
        rc = parse_line(line, k + 1, &r[k], err, errlen);
        if (rc == 0 && k > 0 && r[k].t_send < r[k - 1].t_send)
            rc = errmsg_fail(err, errlen, "--simulate %s: line %lld arrives before line %lld", path,
                             (long long)k + 1, (long long)k);
        k++;
    }
    free(line);
    fclose(f);
    if (rc == 0 && k == 0) rc = errmsg_fail(err, errlen, "--simulate %s: no request", path);
    if (rc < 0) {
        free_reqs(r, k);
        return rc;
    }
    *out = r, *n = k;
    return 0;
}

static batch_end sim_emit(void *ctx, int64_t id, int32_t token, int64_t index, batch_end end,
                          const float *lp) {
    sim_state *st = ctx;
    sim_req *q = &st->r[id];
    (void)token, (void)lp;
    if (index == 0)
        q->t_first = st->t;
    else
        q->itl[index - 1] = st->t - q->t_last;
    q->t_last = st->t;
    q->n_out = index + 1;
    if (end != BATCH_END_NONE) st->done++;
    return BATCH_END_NONE;
}

/* The requests as JSON lines, written whole: into a temp file renamed into place, so that a full
 * disk leaves no partial file (and an existing one as it was). */
static int write_out(const char *path, const sim_req *r, int64_t n, char *err, size_t errlen) {
    char tmp[1100];
    snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return errmsg_fail(err, errlen, "--sim-out %s: cannot write %s", path, tmp);
    for (int64_t i = 0; i < n; i++) {
        fprintf(f,
                "{\"id\": %lld, \"status\": %d, \"t_send\": %.9f, \"t_first\": %.9f, "
                "\"t_end\": %.9f, \"n_prompt\": %lld, \"n_out\": %lld, \"itl\": [",
                (long long)i, r[i].status, r[i].t_send, r[i].t_first, r[i].t_last,
                (long long)r[i].plen, (long long)r[i].n_out);
        for (int64_t k = 0; k + 1 < r[i].n_out; k++)
            fprintf(f, "%s%.9f", k ? ", " : "", r[i].itl[k]);
        fprintf(f, "]}\n");
    }
    const int bad = (fflush(f) != 0) | ferror(f) | (fclose(f) != 0);
    if (!bad && rename(tmp, path) == 0) return 0;
    remove(tmp);
    return errmsg_fail(err, errlen,
                       "--sim-out %s: writing it failed (disk full?); no file was left", path);
}

/* Hands the requests that have arrived by the clock to the batcher (503 past the queue). */
static int admit(batcher *b, const sim_opts *so, sim_state *st, int64_t n, int64_t *next, char *err,
                 size_t errlen) {
    for (; *next < n && st->r[*next].t_send <= st->t; (*next)++) {
        sim_req *q = &st->r[*next];
        const batch_sampling sp = {0, 0, 0, 0, 0};
        if (batcher_fits(b, q->plen, q->max_new, err, errlen) < 0) return -1;
        if (batcher_waiting(b) >= so->max_queue) {
            q->status = 503, q->t_first = q->t_last = st->t;
            st->done++;
        } else if (batcher_add(b, *next, q->prompt, q->plen, q->max_new, &sp) < 0) {
            return errmsg_fail(err, errlen, "out of memory");
        } else {
            q->status = 200;
        }
    }
    return 0;
}

/* Whether argv gives --name (as --name or --name=VALUE). */
static int given_flag(int argc, char **argv, const char *name) {
    const size_t n = strlen(name);
    for (int i = 1; i < argc; i++)
        if (!strncmp(argv[i], "--", 2) && !strncmp(argv[i] + 2, name, n) &&
            (argv[i][2 + n] == '\0' || argv[i][2 + n] == '='))
            return 1;
    return 0;
}

int sim_check_flags(int argc, char **argv, int machine_given, char *err, size_t errlen) {
    static const char *const unused[] = {"host",         "port",        "drain",      "max-tokens",
                                         "draft-tokens", "temperature", "top-k",      "open",
                                         "cross-hosts",  "alg",         "draft-ranks"};
    for (size_t k = 0; k < sizeof unused / sizeof unused[0]; k++)
        if (given_flag(argc, argv, unused[k]))
            return errmsg_fail(err, errlen,
                               "--%s does nothing with --simulate (the virtual clock runs no "
                               "server, samples no token and prices steps without links): drop it",
                               unused[k]);
    if (machine_given && given_flag(argc, argv, "threads"))
        return errmsg_fail(err, errlen,
                           "--threads does nothing with --simulate and --sim-machine (the machine "
                           "the steps are priced at is given, not measured): drop it");
    return 0;
}

int serve_simulate(const model_shape *s, const batch_opts *o, const sim_opts *so, char *err,
                   size_t errlen) {
    sim_req *r = NULL;
    int64_t n = 0, next = 0, steps = 0, tokens = 0;
    if (load(so->workload, &r, &n, err, errlen) < 0) return -1;
    batcher *b = batcher_create(o, err, errlen);
    batch_plan p;
    int32_t *tok = malloc((size_t)o->replicas * (size_t)o->max_seqs * sizeof *tok);
    int rc = b && tok && batch_plan_init(&p, o) == 0 ? 0 : -1;
    sim_state st = {r, 0, 0};
    while (rc == 0 && st.done < n) {
        rc = admit(b, so, &st, n, &next, err, errlen);
        if (rc < 0 || batcher_step(b, &p) == 0) {
            if (rc == 0 && next < n)
                st.t = r[next].t_send; /* idle until the next arrival */
            else if (rc == 0)
                rc = errmsg_fail(err, errlen, "the batcher stalled");
            continue;
        }
        const gen_step cost =
            serve_plan_cost(s, so->nY, so->kv_groups, so->kv_elem_bytes, so->w_elem_bytes, &p);
        st.t += gen_predict(&cost, &so->mc);
        int32_t k = 0;
        for (int32_t j = 0; j < p.nitems; j++) tok[k] = ' ', k += p.items[j].sample;
        steps++;
        batcher_commit(b, &p, tok, sim_emit, &st);
    }
    for (int64_t i = 0; i < n; i++) tokens += r[i].n_out; /* not a padded batch's thrown away */
    if (rc == 0) rc = write_out(so->out, r, n, err, errlen);
    if (rc == 0)
        fprintf(stderr,
                "serve simulate | %lld requests in %.3f s of the virtual clock | %lld steps, "
                "%lld tokens, %.0f tok/s | priced at BW %.2f GB/s, C %.2f GFLOP/s | %lld rows of "
                "padding\n",
                (long long)n, st.t, (long long)steps, (long long)tokens,
                st.t > 0 ? (double)tokens / st.t : 0.0, so->mc.bw / 1e9, so->mc.flops / 1e9,
                (long long)batcher_get_counts(b).padding_rows);
    if (b) batch_plan_free(&p);
    batcher_destroy(b);
    free(tok);
    free_reqs(r, n);
    return rc;
}

#define _POSIX_C_SOURCE 200809L /* open_memstream */
/* http: the HTTP side of the front (see front.h): routes, the completion request's checks, JSON
 * and server-sent events. libmicrohttpd runs a thread per connection; a completion's thread waits
 * on its request's condition variable for the serving loop's tokens. */
#include <arpa/inet.h>
#include <jansson.h>
#include <math.h>
#include <microhttpd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "mesh/errmsg.h"
#include "mesh/mesh.h"
#include "train/serve/chat.h"
#include "train/serve/front_impl.h"
#include "train/serve/logprob_json.h"
#include "train/serve/page.h"

#define BODY_MAX (1 << 20)
#define CHOICES_MAX 8 /* n of a request: its completions, each a request of the scheduler */

/* One connection's request: its body as it arrives, and the completions it became. */
typedef struct {
    char *body;
    size_t n, cap;
    int too_big;
    front_req *req[CHOICES_MAX];
    int nreq;
} conn;

/* ---------------------------------------------------------------- responses */

static enum MHD_Result respond(struct MHD_Connection *c, unsigned status, const char *type,
                               const char *body, size_t n) {
    struct MHD_Response *r =
        MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", type);
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    const enum MHD_Result ok = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ok;
}

static enum MHD_Result respond_json(struct MHD_Connection *c, unsigned status, json_t *j) {
    char *s = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    if (!s) return MHD_NO;
    const enum MHD_Result ok = respond(c, status, "application/json", s, strlen(s));
    free(s);
    return ok;
}

/* OpenAI's error object: {"error": {"message", "type", "param", "code"}}. */
static json_t *error_json(unsigned status, const char *param, const char *msg) {
    const char *type = status == 503   ? "server_overloaded"
                       : status >= 500 ? "server_error"
                                       : "invalid_request_error";
    return json_pack("{s:{s:s, s:s, s:s?, s:n}}", "error", "message", msg, "type", type, "param",
                     param, "code");
}

static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *param,
                                     const char *fmt, ...) __attribute__((format(printf, 4, 5)));
static enum MHD_Result respond_error(struct MHD_Connection *c, unsigned status, const char *param,
                                     const char *fmt, ...) {
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return respond_json(c, status, error_json(status, param, msg));
}

static const char *finish_reason(const front_req *r) {
    return r->end == BATCH_END_STOP ? "stop" : r->end == BATCH_END_LENGTH ? "length" : NULL;
}

/* Choice i of an answer with text[0..n) and its logprobs lp (taken): a completion's {"text"}, a
 * chat completion's {"message"}, or a chat stream's {"delta"} (the first with the role; the
 * last, with finish, empty). */
static json_t *choice_json(const front_req *r, int i, const char *text, size_t n, json_t *lp,
                           int chunk, int first, int final) {
    const char *finish = final ? finish_reason(r) : NULL;
    if (!r->chat)
        return json_pack("{s:s%, s:i, s:o, s:s?}", "text", text, n, "index", i, "logprobs", lp,
                         "finish_reason", finish);
    json_t *msg = !chunk        ? json_pack("{s:s, s:s%}", "role", "assistant", "content", text, n)
                  : first       ? json_pack("{s:s, s:s%}", "role", "assistant", "content", text, n)
                  : n || !final ? json_pack("{s:s%}", "content", text, n)
                                : json_object();
    return json_pack("{s:i, s:o, s:o, s:s?}", "index", i, chunk ? "delta" : "message", msg,
                     "logprobs", lp, "finish_reason", finish);
}

/* The usage of an answer's completions rs[0..n), `tokens` generated so far over all of them
 * (the prompt counted once), with speculative decoding's drafts and alpha. */
static json_t *usage_json(front_req *const *rs, int n, size_t tokens) {
    json_t *u =
        json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)rs[0]->plen, "completion_tokens",
                  (json_int_t)tokens, "total_tokens", (json_int_t)(rs[0]->plen + (int64_t)tokens));
    int64_t drafted = 0, kept = 0, rejected = 0;
    for (int i = 0; i < n; i++)
        drafted += rs[i]->drafted, kept += rs[i]->kept, rejected += rs[i]->rejected;
    if (u && drafted > 0) {
        const int64_t judged = kept + rejected;
        json_object_set_new(u, "speculative",
                            json_pack("{s:I, s:I, s:I, s:f}", "drafted", (json_int_t)drafted,
                                      "accepted", (json_int_t)kept, "rejected",
                                      (json_int_t)rejected, "alpha",
                                      judged ? (double)kept / (double)judged : 0.0));
    }
    return u;
}

/* An answer (or a stream's chunk of one) around `choices`, with `usage` when not NULL. */
static json_t *answer_json(const front_req *r, int chunk, json_t *choices, json_t *usage) {
    char id[40];
    snprintf(id, sizeof id, "%s-%lld", r->chat ? "chatcmpl" : "cmpl", (long long)r->id);
    const char *object = !r->chat ? "text_completion"
                         : chunk  ? "chat.completion.chunk"
                                  : "chat.completion";
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:o}", "id", id, "object", object, "created",
                          (json_int_t)time(NULL), "model", "meshtrain", "choices", choices);
    if (j && usage)
        json_object_set_new(j, "usage", usage);
    else
        json_decref(usage);
    return j;
}

/* The whole text of a completion, as valid UTF-8 (malloc'd; NULL out of memory). */
static char *clean_text(const front_req *r, size_t from, size_t upto, size_t *n) {
    char *clean = malloc(3 * (upto - from) + 1);
    if (clean) *n = text_utf8_clean(clean, r->out + from, upto - from);
    return clean;
}

/* ---------------------------------------------------------------- the request's fields */

/* An integer field in [lo, hi], or def when absent. 0, or −1 with the reason in err. */
static int int_field(json_t *body, const char *key, int64_t lo, int64_t hi, int64_t def,
                     int64_t *out, char *err, size_t errlen) {
    json_t *v = json_object_get(body, key);
    *out = def;
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < lo || json_integer_value(v) > hi)
        return errmsg_fail(err, errlen, "%s must be an integer in [%lld, %lld]", key, (long long)lo,
                           (long long)hi);
    *out = json_integer_value(v);
    return 0;
}

static int parse_stop(json_t *v, text_stops *st, char *err, size_t errlen) {
    st->n = 0;
    if (!v || json_is_null(v)) return 0;
    json_t *one[1] = {v};
    const size_t n = json_is_array(v) ? json_array_size(v) : 1;
    if ((!json_is_array(v) && !json_is_string(v)) || n > TEXT_MAX_STOPS)
        return errmsg_fail(err, errlen, "stop must be a string or an array of at most %d strings",
                           TEXT_MAX_STOPS);
    for (size_t i = 0; i < n; i++) {
        json_t *s = json_is_array(v) ? json_array_get(v, i) : one[0];
        const size_t len = json_is_string(s) ? json_string_length(s) : 0;
        if (len < 1 || len > TEXT_MAX_STOP_LEN)
            return errmsg_fail(err, errlen, "each stop must be a string of 1 to %d bytes",
                               TEXT_MAX_STOP_LEN);
        memcpy(st->s[st->n], json_string_value(s), len);
        st->len[st->n++] = len;
    }
    return 0;
}

/* The prompt's bytes into r as tokens (each below the vocabulary). */
static int set_prompt(serve_front *f, front_req *r, const char *bytes, size_t n, char *err,
                      size_t errlen) {
    r->plen = (int64_t)n;
    r->prompt = malloc(n * sizeof *r->prompt + 1);
    if (!r->prompt) return errmsg_fail(err, errlen, "out of memory");
    for (int64_t i = 0; i < r->plen; i++) {
        r->prompt[i] = (unsigned char)bytes[i];
        if (r->prompt[i] >= f->o.vocab)
            return errmsg_fail(err, errlen, "prompt byte %lld is %d, past the vocabulary of %lld",
                               (long long)i, r->prompt[i], (long long)f->o.vocab);
    }
    return 0;
}

/* The request's prompt: "prompt", or a chat's "messages" through the chat template (chat.h). */
static int parse_prompt(serve_front *f, json_t *body, front_req *r, const char **param, char *err,
                        size_t errlen) {
    if (r->chat) {
        char *text;
        size_t n;
        *param = "messages";
        if (json_object_get(body, "prompt"))
            return errmsg_fail(err, errlen, "a chat completion takes messages, not a prompt");
        if (chat_render(json_object_get(body, "messages"), &text, &n, err, errlen) < 0) return -1;
        const int rc = set_prompt(f, r, text, n, err, errlen);
        free(text);
        return rc;
    }
    json_t *p = json_object_get(body, *param = "prompt");
    if (!json_is_string(p) || json_string_length(p) == 0)
        return errmsg_fail(err, errlen, "prompt must be a non-empty string");
    return set_prompt(f, r, json_string_value(p), json_string_length(p), err, errlen);
}

/* The request's fields into r (*n: its completions); −1 with the reason (and the field in
 * *param) when one is wrong. */
static int parse_fields(serve_front *f, json_t *body, front_req *r, int *nchoices,
                        const char **param, char *err, size_t errlen) {
    const front_opts *o = &f->o;
    if (parse_prompt(f, body, r, param, err, errlen) < 0) return -1;
    int64_t top_k, seed, n;
    if (int_field(body, *param = "max_tokens", 1, INT32_MAX, o->default_max_tokens, &r->max_new,
                  err, errlen) < 0 ||
        int_field(body, *param = "top_k", -1, INT32_MAX, o->top_k, &top_k, err, errlen) < 0 ||
        int_field(body, *param = "seed", 0, INT64_MAX, (int64_t)o->seed, &seed, err, errlen) < 0 ||
        int_field(body, *param = "n", 1, CHOICES_MAX, 1, &n, err, errlen) < 0)
        return -1;
    *nchoices = (int)n;
    json_t *t = json_object_get(body, *param = "temperature");
    r->sp = (batch_sampling){o->temperature, top_k < 0 ? 0 : top_k, (uint64_t)seed, 0, 0};
    if (t && !json_is_null(t)) {
        if (!json_is_number(t) || !(json_number_value(t) >= 0) || json_number_value(t) > 100)
            return errmsg_fail(err, errlen, "temperature must be a number in [0, 100]");
        r->sp.temperature = json_number_value(t);
    }
    json_t *s = json_object_get(body, *param = "stream");
    if (s && !json_is_null(s) && !json_is_boolean(s))
        return errmsg_fail(err, errlen, "stream must be true or false");
    r->stream = json_is_true(s);
    json_t *so = json_object_get(body, *param = "stream_options");
    if (so && !json_is_null(so) && (!json_is_object(so) || !r->stream))
        return errmsg_fail(err, errlen, "stream_options must be an object, with stream true");
    r->usage_always = json_is_true(json_object_get(so, "continuous_usage_stats"));
    if (json_is_true(json_object_get(body, *param = "echo")))
        return errmsg_fail(err, errlen, "echo is not supported");
    if (logprob_parse(body, r, o->vocab, param, err, errlen) < 0) return -1;
    if (parse_stop(json_object_get(body, *param = "stop"), &r->stops, err, errlen) < 0) return -1;
    *param = "max_tokens";
    if (batcher_fits(f->s, r->plen, r->max_new, err, errlen) < 0) return -1;
    r->out = malloc((size_t)r->max_new);
    return r->out && logprob_alloc(r) == 0 ? 0 : errmsg_fail(err, errlen, "out of memory");
}

/* ---------------------------------------------------------------- completions */

/* A stream's state: its completions, the event being sent, each completion's text sent so far,
 * the tokens its chunks have counted and whether its last chunk went out. */
typedef struct {
    serve_front *f;
    front_req *r[CHOICES_MAX];
    int n, fin[CHOICES_MAX], nfin, done;
    size_t sent[CHOICES_MAX], told[CHOICES_MAX];
    char *ev;
    size_t evlen, evoff;
    pthread_cond_t cv; /* its requests' waiter */
} stream_ctx;

static size_t tokens_told(const stream_ctx *s) {
    size_t t = 0;
    for (int i = 0; i < s->n; i++) t += s->told[i];
    return t;
}

/* The next chunk of a stream's completion i, or NULL when it has none yet. The last chunk of the
 * last completion to end carries usage; with continuous usage stats, every chunk does, and new
 * tokens make a chunk even while the text holds them back (an incomplete character, the
 * beginning of a stop string): its text is empty and its usage counts them, as vLLM's. */
static json_t *next_chunk(stream_ctx *s, int i) {
    front_req *r = s->r[i];
    const int done = r->state == REQ_DONE;
    const size_t upto = done ? r->cut : text_sendable(r->out, r->nout, &r->stops);
    const int held = !done && r->usage_always && r->nout > s->told[i];
    if (s->sent[i] < upto || held) {
        size_t n = 0;
        char *clean = clean_text(r, s->sent[i], upto, &n);
        const int first = s->told[i] == 0;
        json_t *lp = logprob_json(r, s->sent[i], upto);
        s->sent[i] = upto, s->told[i] = r->nout;
        json_t *j =
            clean ? answer_json(s->r[0], 1,
                                json_pack("[o]", choice_json(r, i, clean, n, lp, 1, first, 0)),
                                r->usage_always ? usage_json(s->r, s->n, tokens_told(s)) : NULL)
                  : NULL;
        free(clean);
        return j;
    }
    if (!done) return NULL;
    s->fin[i] = 1, s->nfin++;
    if (r->status) return error_json((unsigned)r->status, NULL, r->error);
    size_t total = 0;
    for (int k = 0; k < s->n; k++) total += s->r[k]->nout;
    return answer_json(
        s->r[0], 1, json_pack("[o]", choice_json(r, i, "", 0, json_null(), 1, s->told[i] == 0, 1)),
        s->nfin == s->n || r->usage_always ? usage_json(s->r, s->n, total) : NULL);
}

/* The next event of a stream into s->ev (under f->mu; waits for tokens). 0 at the end. */
static int next_event(stream_ctx *s) {
    json_t *j = NULL;
    while (!j) {
        if (s->done) return 0;
        if (s->nfin == s->n) {
            s->done = 1;
            free(s->ev);
            s->ev = strdup("data: [DONE]\n\n");
            s->evlen = s->ev ? strlen(s->ev) : 0, s->evoff = 0;
            return s->ev != NULL;
        }
        for (int i = 0; i < s->n && !j; i++)
            if (!s->fin[i]) j = next_chunk(s, i);
        if (!j && s->nfin < s->n) pthread_cond_wait(&s->cv, &s->f->mu);
    }
    char *txt = json_dumps(j, JSON_COMPACT);
    json_decref(j);
    free(s->ev);
    s->ev = NULL;
    if (!txt) return 0;
    const size_t n = strlen(txt);
    s->ev = malloc(n + 9);
    if (s->ev) snprintf(s->ev, n + 9, "data: %s\n\n", txt);
    free(txt);
    s->evlen = s->ev ? strlen(s->ev) : 0, s->evoff = 0;
    return s->ev != NULL;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *s = cls;
    (void)pos;
    if (s->evoff == s->evlen) {
        pthread_mutex_lock(&s->f->mu);
        const int more = next_event(s);
        pthread_mutex_unlock(&s->f->mu);
        if (!more) return MHD_CONTENT_READER_END_OF_STREAM;
    }
    const size_t n = s->evlen - s->evoff < max ? s->evlen - s->evoff : max;
    memcpy(buf, s->ev + s->evoff, n);
    s->evoff += n;
    return (ssize_t)n;
}

static void stream_free(void *cls) {
    stream_ctx *s = cls;
    pthread_mutex_lock(&s->f->mu);
    for (int i = 0; i < s->n; i++) {
        s->r[i]->waiter = NULL;
        front_req_unref(s->r[i]);
    }
    pthread_mutex_unlock(&s->f->mu);
    pthread_cond_destroy(&s->cv);
    free(s->ev), free(s);
}

/* The server-sent events of rs[0..n) (called under f->mu, which it releases; the caller took the
 * stream's references). */
static enum MHD_Result respond_stream(serve_front *f, struct MHD_Connection *c, front_req **rs,
                                      int n) {
    stream_ctx *s = calloc(1, sizeof *s);
    if (s) pthread_cond_init(&s->cv, NULL);
    for (int i = 0; s && i < n; i++) rs[i]->waiter = &s->cv;
    pthread_mutex_unlock(&f->mu);
    struct MHD_Response *resp =
        s ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free)
          : NULL;
    if (!resp) {
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < n; i++) rs[i]->waiter = NULL, front_req_unref(rs[i]);
        pthread_mutex_unlock(&f->mu);
        if (s) pthread_cond_destroy(&s->cv);
        free(s);
        return MHD_NO;
    }
    s->f = f, s->n = n;
    memcpy(s->r, rs, (size_t)n * sizeof *rs);
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    const enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Waits for the whole of rs[0..n) (called under f->mu, which it releases), then answers: every
 * completion a choice, or the first error. */
static enum MHD_Result respond_whole(serve_front *f, struct MHD_Connection *c, front_req **rs,
                                     int n) {
    pthread_cond_t cv;
    pthread_cond_init(&cv, NULL);
    for (int i = 0; i < n; i++) rs[i]->waiter = &cv;
    for (int i = 0; i < n; i++)
        while (rs[i]->state != REQ_DONE) pthread_cond_wait(&cv, &f->mu);
    for (int i = 0; i < n; i++) rs[i]->waiter = NULL;
    pthread_cond_destroy(&cv);
    json_t *choices = json_array(), *j = NULL;
    unsigned status = 200;
    size_t total = 0;
    for (int i = 0; i < n && choices; i++) {
        const front_req *r = rs[i];
        if (r->status && status == 200)
            status = (unsigned)r->status, j = error_json(status, NULL, r->error);
        size_t len = 0;
        char *clean = clean_text(r, 0, r->cut, &len);
        json_t *ch =
            clean ? choice_json(r, i, clean, len, logprob_json(r, 0, r->cut), 0, 1, 1) : NULL;
        if (json_array_append_new(choices, ch) < 0) json_decref(choices), choices = NULL;
        free(clean);
        total += r->nout;
    }
    if (!j && choices)
        j = answer_json(rs[0], 0, choices, usage_json(rs, n, total));
    else
        json_decref(choices);
    pthread_mutex_unlock(&f->mu);
    return j ? respond_json(c, status, j) : MHD_NO;
}

/* Completion i of n: a copy of r drawing with seed + i (NULL out of memory). */
static front_req *copy_req(const front_req *r, int i) {
    front_req *q = malloc(sizeof *q);
    if (!q) return NULL;
    *q = *r;
    q->sp.seed = r->sp.seed + (uint64_t)i;
    q->prompt = malloc((size_t)r->plen * sizeof *q->prompt);
    q->out = malloc((size_t)r->max_new);
    q->lp = NULL;
    if (!q->prompt || !q->out || logprob_alloc(q) < 0) {
        free(q->prompt), free(q->out), free(q->lp), free(q);
        return NULL;
    }
    memcpy(q->prompt, r->prompt, (size_t)r->plen * sizeof *q->prompt);
    return q;
}

static void free_reqs(front_req **rs, int n) {
    for (int i = 0; i < n; i++)
        if (rs[i]) free(rs[i]->prompt), free(rs[i]->out), free(rs[i]->lp), free(rs[i]);
}

/* The request's body into rs[0..*n): the completion and its copies. 0, or an error answered. */
static int make_reqs(serve_front *f, struct MHD_Connection *c, conn *k, int chat, front_req **rs,
                     int *n, enum MHD_Result *answered) {
    json_error_t jerr;
    json_t *body = k->too_big ? NULL : json_loadb(k->body ? k->body : "", k->n, 0, &jerr);
    if (k->too_big || !body || !json_is_object(body)) {
        *answered = k->too_big
                        ? respond_error(c, 413, NULL, "the body is larger than %d bytes", BODY_MAX)
                    : !body ? respond_error(c, 400, NULL, "malformed JSON: %s (line %d, column %d)",
                                            jerr.text, jerr.line, jerr.column)
                            : respond_error(c, 400, NULL, "the body must be a JSON object");
        json_decref(body);
        return -1;
    }
    char err[512];
    const char *param = NULL;
    rs[0] = calloc(1, sizeof *rs[0]);
    if (!rs[0]) {
        json_decref(body);
        *answered = MHD_NO;
        return -1;
    }
    rs[0]->chat = chat;
    *n = 1;
    int rc = parse_fields(f, body, rs[0], n, &param, err, sizeof err);
    json_decref(body);
    for (int i = 1; rc == 0 && i < *n; i++)
        if (!(rs[i] = copy_req(rs[0], i))) rc = errmsg_fail(err, sizeof err, "out of memory");
    if (rc < 0) {
        free_reqs(rs, *n);
        *answered = respond_error(c, 400, param, "%s", err);
        return -1;
    }
    return 0;
}

static enum MHD_Result completions(serve_front *f, struct MHD_Connection *c, conn *k, int chat) {
    front_req *rs[CHOICES_MAX] = {NULL};
    int n = 0;
    enum MHD_Result answered;
    if (make_reqs(f, c, k, chat, rs, &n, &answered) < 0) return answered;
    pthread_mutex_lock(&f->mu);
    const int64_t waiting = f->nin + f->nwaiting;
    const char *refuse = f->draining                    ? "the server is shutting down"
                         : waiting + n > f->o.max_queue ? "the queue is full"
                                                        : NULL;
    int queued = 0;
    for (; !refuse && queued < n; queued++) {
        rs[queued]->refs = 2; /* the serving loop's and the connection's */
        rs[queued]->t_arrive = mesh_now();
        rs[queued]->id = f->next_id++;
        if (front_req_enqueue(f, rs[queued]) < 0) refuse = "out of memory";
    }
    if (refuse) {
        for (int i = 0; i < queued; i++) { /* those queued end at once, unanswered */
            rs[i]->gone = 1;
            front_req_finish(f, rs[i], BATCH_END_CANCEL, 503, refuse);
            front_req_unref(rs[i]);
        }
        f->met.requests[METRICS_END_REJECTED] += n - queued;
        pthread_mutex_unlock(&f->mu);
        free_reqs(rs + queued, n - queued);
        return respond_error(c, 503, NULL, "%s (%lld requests waiting, --max-queue %lld)", refuse,
                             (long long)waiting, (long long)f->o.max_queue);
    }
    memcpy(k->req, rs, sizeof rs);
    k->nreq = n;
    f->answering++;
    /* not idle while it waits for its answer (completed sets the timeout back) */
    MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, 0u);
    if (!rs[0]->stream) return respond_whole(f, c, rs, n);
    for (int i = 0; i < n; i++) rs[i]->refs++; /* the stream's */
    return respond_stream(f, c, rs, n);
}

/* ---------------------------------------------------------------- routes */

static enum MHD_Result metrics_page(serve_front *f, struct MHD_Connection *c) {
    char *text = NULL;
    size_t n = 0;
    FILE *mem = open_memstream(&text, &n);
    if (!mem) return MHD_NO;
    pthread_mutex_lock(&f->mu);
    metrics_write(mem, &f->met);
    pthread_mutex_unlock(&f->mu);
    fclose(mem);
    const enum MHD_Result ok = respond(c, 200, "text/plain; version=0.0.4", text, n);
    free(text);
    return ok;
}

static enum MHD_Result handle(void *cls, struct MHD_Connection *c, const char *url,
                              const char *method, const char *version, const char *upload,
                              size_t *upload_size, void **con_cls) {
    serve_front *f = cls;
    conn *k = *con_cls;
    (void)version;
    if (!k) {
        *con_cls = k = calloc(1, sizeof *k);
        return k ? MHD_YES : MHD_NO;
    }
    if (*upload_size) {
        if (k->n + *upload_size > BODY_MAX) k->too_big = 1;
        if (!k->too_big && k->n + *upload_size > k->cap) {
            const size_t cap = 2 * (k->n + *upload_size);
            char *b = realloc(k->body, cap);
            if (b)
                k->body = b, k->cap = cap;
            else
                k->too_big = 1;
        }
        if (!k->too_big) memcpy(k->body + k->n, upload, *upload_size), k->n += *upload_size;
        *upload_size = 0;
        return MHD_YES;
    }
    const int get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    if (!strcmp(url, "/v1/completions") || !strcmp(url, "/v1/chat/completions"))
        return post ? completions(f, c, k, !strcmp(url, "/v1/chat/completions"))
                    : respond_error(c, 405, NULL, "use POST for %s", url);
    if (!get) return respond_error(c, 405, NULL, "%s %s: only GET here", method, url);
    if (!strcmp(url, "/"))
        return respond(c, 200, "text/html; charset=utf-8", serve_page_html,
                       strlen(serve_page_html));
    if (!strcmp(url, "/metrics")) return metrics_page(f, c);
    if (!strcmp(url, "/health")) {
        pthread_mutex_lock(&f->mu);
        const int draining = f->draining;
        pthread_mutex_unlock(&f->mu);
        return respond_json(c, draining ? 503 : 200,
                            json_pack("{s:s}", "status", draining ? "shutting down" : "ok"));
    }
    if (!strcmp(url, "/v1/models"))
        return respond_json(c, 200,
                            json_pack("{s:s, s:[{s:s, s:s, s:s}]}", "object", "list", "data", "id",
                                      "meshtrain", "object", "model", "owned_by", "meshtrain"));
    return respond_error(c, 404, NULL, "no route %s", url);
}

/* The end of an HTTP request: a completion whose client left before it ended is cancelled. */
static unsigned idle_timeout(const front_opts *o) {
    return o->idle_timeout ? o->idle_timeout : 120u;
}

static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    serve_front *f = cls;
    conn *k = *con_cls;
    if (!k) return;
    if (k->nreq && toe == MHD_REQUEST_TERMINATED_COMPLETED_OK) /* kept alive: idle again */
        MHD_set_connection_option(c, MHD_CONNECTION_OPTION_TIMEOUT, idle_timeout(&f->o));
    if (k->nreq) {
        pthread_mutex_lock(&f->mu);
        for (int i = 0; i < k->nreq; i++) {
            front_req *r = k->req[i];
            if (r->state != REQ_DONE) {
                r->gone = 1;
                if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || r->stream)
                    front_req_cancel(f, r->id);
            }
            front_req_unref(r);
        }
        f->answering--;
        pthread_cond_broadcast(&f->wake);
        pthread_mutex_unlock(&f->mu);
    }
    free(k->body), free(k);
    *con_cls = NULL;
}

/* ---------------------------------------------------------------- the daemon */

serve_front *front_create(const front_opts *o, const batcher *s, char *err, size_t errlen) {
    union {
        struct sockaddr_in v4;
        struct sockaddr_in6 v6;
    } addr;
    memset(&addr, 0, sizeof addr);
    const char *host = strcmp(o->host, "localhost") ? o->host : "127.0.0.1";
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD;
    if (inet_pton(AF_INET, host, &addr.v4.sin_addr) == 1) {
        addr.v4.sin_family = AF_INET;
        addr.v4.sin_port = htons((uint16_t)o->port);
    } else if (inet_pton(AF_INET6, host, &addr.v6.sin6_addr) == 1) {
        addr.v6.sin6_family = AF_INET6;
        addr.v6.sin6_port = htons((uint16_t)o->port);
        flags |= MHD_USE_IPv6;
    } else {
        errmsg_fail(err, errlen, "--host %s: not an IPv4 or IPv6 address", o->host);
        return NULL;
    }
    serve_front *f = calloc(1, sizeof *f);
    if (!f) return NULL;
    f->o = *o, f->s = s;
    pthread_mutex_init(&f->mu, NULL);
    pthread_cond_init(&f->wake, NULL);
    f->d = MHD_start_daemon(flags, (uint16_t)o->port, NULL, NULL, handle, f, MHD_OPTION_SOCK_ADDR,
                            (struct sockaddr *)&addr, MHD_OPTION_NOTIFY_COMPLETED, completed, f,
                            MHD_OPTION_LISTENING_ADDRESS_REUSE, 1u, MHD_OPTION_CONNECTION_LIMIT,
                            1024u, MHD_OPTION_CONNECTION_TIMEOUT, idle_timeout(o), MHD_OPTION_END);
    const union MHD_DaemonInfo *info =
        f->d ? MHD_get_daemon_info(f->d, MHD_DAEMON_INFO_BIND_PORT) : NULL;
    if (!info) {
        errmsg_fail(err, errlen,
                    "cannot listen on %s port %d (in use, or not this host's "
                    "address?)",
                    o->host, o->port);
        front_destroy(f, 0);
        return NULL;
    }
    f->port = info->port;
    return f;
}

int front_port(const serve_front *f) {
    return f->port;
}

void front_destroy(serve_front *f, double linger) {
    if (!f) return;
    pthread_mutex_lock(&f->mu); /* no HTTP thread may wait for a request that cannot end */
    f->draining = 1;
    while (f->nlive > 0)
        front_req_finish(f, f->live[0], BATCH_END_NONE, 503, "the server is shutting down");
    const double until = mesh_now() + linger; /* the last answers go out */
    while (f->answering > 0 && mesh_now() < until) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        ts.tv_nsec += 10000000L;
        if (ts.tv_nsec >= 1000000000L) ts.tv_sec++, ts.tv_nsec -= 1000000000L;
        pthread_cond_timedwait(&f->wake, &f->mu, &ts);
    }
    pthread_mutex_unlock(&f->mu);
    if (f->d) MHD_stop_daemon(f->d);
    pthread_mutex_destroy(&f->mu);
    pthread_cond_destroy(&f->wake);
    free(f->live), free(f->cancel), free(f);
}

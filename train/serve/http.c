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
#include "train/serve/front_impl.h"
#include "train/serve/page.h"

#define BODY_MAX (1 << 20)

/* One connection's request: its body as it arrives, and the completion it became. */
typedef struct {
    char *body;
    size_t n, cap;
    int too_big;
    front_req *req;
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

/* A completion object (or a stream's chunk of it) with text[0..n); with usage (the final chunk,
 * or every chunk with stream_options.continuous_usage_stats) `tokens` generated so far. */
static json_t *completion_json(const front_req *r, const char *text, size_t n, int final, int usage,
                               size_t tokens) {
    char id[32];
    snprintf(id, sizeof id, "cmpl-%lld", (long long)r->id);
    json_t *j = json_pack("{s:s, s:s, s:I, s:s, s:[{s:s%, s:i, s:n, s:s?}]}", "id", id, "object",
                          "text_completion", "created", (json_int_t)time(NULL), "model",
                          "meshtrain", "choices", "text", text, n, "index", 0, "logprobs",
                          "finish_reason", final ? finish_reason(r) : NULL);
    json_t *u = usage ? json_pack("{s:I, s:I, s:I}", "prompt_tokens", (json_int_t)r->plen,
                                  "completion_tokens", (json_int_t)tokens, "total_tokens",
                                  (json_int_t)(r->plen + (int64_t)tokens))
                      : NULL;
    if (u && r->drafted > 0) { /* speculative decoding: the request's drafts and alpha */
        const int64_t judged = r->kept + r->rejected;
        json_object_set_new(u, "speculative",
                            json_pack("{s:I, s:I, s:I, s:f}", "drafted", (json_int_t)r->drafted,
                                      "accepted", (json_int_t)r->kept, "rejected",
                                      (json_int_t)r->rejected, "alpha",
                                      judged ? (double)r->kept / (double)judged : 0.0));
    }
    if (j && u)
        json_object_set_new(j, "usage", u);
    else
        json_decref(u);
    return j;
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

/* The request's fields into r; −1 with the reason (and the field in *param) when one is wrong. */
static int parse_fields(serve_front *f, json_t *body, front_req *r, const char **param, char *err,
                        size_t errlen) {
    const front_opts *o = &f->o;
    json_t *p = json_object_get(body, *param = "prompt");
    if (!json_is_string(p) || json_string_length(p) == 0)
        return errmsg_fail(err, errlen, "prompt must be a non-empty string");
    r->plen = (int64_t)json_string_length(p);
    r->prompt = malloc((size_t)r->plen * sizeof *r->prompt);
    if (!r->prompt) return errmsg_fail(err, errlen, "out of memory");
    for (int64_t i = 0; i < r->plen; i++) {
        r->prompt[i] = (unsigned char)json_string_value(p)[i];
        if (r->prompt[i] >= o->vocab)
            return errmsg_fail(err, errlen, "prompt byte %lld is %d, past the vocabulary of %lld",
                               (long long)i, r->prompt[i], (long long)o->vocab);
    }
    int64_t top_k, seed, n;
    if (int_field(body, *param = "max_tokens", 1, INT32_MAX, o->default_max_tokens, &r->max_new,
                  err, errlen) < 0 ||
        int_field(body, *param = "top_k", -1, INT32_MAX, o->top_k, &top_k, err, errlen) < 0 ||
        int_field(body, *param = "seed", 0, INT64_MAX, (int64_t)o->seed, &seed, err, errlen) < 0 ||
        int_field(body, *param = "n", 1, 1, 1, &n, err, errlen) < 0)
        return -1;
    json_t *t = json_object_get(body, *param = "temperature");
    r->sp = (batch_sampling){o->temperature, top_k < 0 ? 0 : top_k, (uint64_t)seed};
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
    if (json_is_true(json_object_get(body, *param = "echo")) ||
        (json_object_get(body, "logprobs") && !json_is_null(json_object_get(body, "logprobs"))))
        return errmsg_fail(err, errlen, "echo and logprobs are not supported");
    if (parse_stop(json_object_get(body, *param = "stop"), &r->stops, err, errlen) < 0) return -1;
    *param = "max_tokens";
    if (batcher_fits(f->s, r->plen, r->max_new, err, errlen) < 0) return -1;
    r->out = malloc((size_t)r->max_new);
    return r->out ? 0 : errmsg_fail(err, errlen, "out of memory");
}

/* ---------------------------------------------------------------- completions */

/* A stream's state: the event being sent, the text sent so far, what is left to send. */
typedef struct {
    serve_front *f;
    front_req *r;
    char *ev;
    size_t evlen, evoff, sent;
    int phase; /* 0 text, 1 the final chunk sent, 2 [DONE] sent */
} stream_ctx;

/* The next event of a stream into s->ev (under f->mu; waits for tokens). 0 at the end. */
static int next_event(stream_ctx *s) {
    front_req *r = s->r;
    json_t *j = NULL;
    for (;;) {
        if (s->phase == 2) return 0;
        const int done = r->state == REQ_DONE;
        const size_t upto = done ? r->cut : text_sendable(r->out, r->nout, &r->stops);
        if (s->sent < upto) {
            char *clean = malloc(3 * (upto - s->sent) + 1);
            if (!clean) return 0;
            const size_t n = text_utf8_clean(clean, r->out + s->sent, upto - s->sent);
            j = completion_json(r, clean, n, 0, r->usage_always, upto);
            free(clean);
            s->sent = upto;
            break;
        }
        if (done) {
            if (s->phase++ == 1) {
                free(s->ev);
                s->ev = strdup("data: [DONE]\n\n");
                s->evlen = strlen(s->ev), s->evoff = 0;
                return 1;
            }
            j = r->status ? error_json((unsigned)r->status, NULL, r->error)
                          : completion_json(r, "", 0, 1, 1, r->nout);
            break;
        }
        pthread_cond_wait(&r->cv, &s->f->mu);
    }
    char *txt = j ? json_dumps(j, JSON_COMPACT) : NULL;
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
    front_req_unref(s->r);
    pthread_mutex_unlock(&s->f->mu);
    free(s->ev), free(s);
}

/* The server-sent events of r (the caller took the stream's reference). */
static enum MHD_Result respond_stream(serve_front *f, struct MHD_Connection *c, front_req *r) {
    stream_ctx *s = calloc(1, sizeof *s);
    struct MHD_Response *resp =
        s ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 4096, stream_read, s, stream_free)
          : NULL;
    if (!resp) {
        pthread_mutex_lock(&f->mu);
        front_req_unref(r);
        pthread_mutex_unlock(&f->mu);
        free(s);
        return MHD_NO;
    }
    s->f = f, s->r = r;
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    const enum MHD_Result ok = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ok;
}

/* Waits for the whole completion (called under f->mu, which it releases), then answers. */
static enum MHD_Result respond_whole(serve_front *f, struct MHD_Connection *c, front_req *r) {
    while (r->state != REQ_DONE) pthread_cond_wait(&r->cv, &f->mu);
    json_t *j = NULL;
    unsigned status = 200;
    if (r->status) {
        status = (unsigned)r->status;
        j = error_json(status, NULL, r->error);
    } else {
        char *clean = malloc(3 * r->cut + 1);
        if (clean)
            j = completion_json(r, clean, text_utf8_clean(clean, r->out, r->cut), 1, 1, r->nout);
        free(clean);
    }
    pthread_mutex_unlock(&f->mu);
    return j ? respond_json(c, status, j) : MHD_NO;
}

static enum MHD_Result completions(serve_front *f, struct MHD_Connection *c, conn *k) {
    if (k->too_big)
        return respond_error(c, 413, NULL, "the body is larger than %d bytes", BODY_MAX);
    json_error_t jerr;
    json_t *body = json_loadb(k->body ? k->body : "", k->n, 0, &jerr);
    if (!body)
        return respond_error(c, 400, NULL, "malformed JSON: %s (line %d, column %d)", jerr.text,
                             jerr.line, jerr.column);
    if (!json_is_object(body)) {
        json_decref(body);
        return respond_error(c, 400, NULL, "the body must be a JSON object");
    }
    front_req *r = calloc(1, sizeof *r);
    if (!r) {
        json_decref(body);
        return MHD_NO;
    }
    char err[512];
    const char *param = NULL;
    const int rc = parse_fields(f, body, r, &param, err, sizeof err);
    json_decref(body);
    if (rc < 0) {
        free(r->prompt), free(r->out), free(r);
        return respond_error(c, 400, param, "%s", err);
    }
    pthread_cond_init(&r->cv, NULL);
    r->refs = 2; /* the serving loop's and the connection's */
    r->t_arrive = mesh_now();
    pthread_mutex_lock(&f->mu);
    const int64_t waiting = f->nin + f->nwaiting;
    const char *refuse = f->draining                 ? "the server is shutting down"
                         : waiting >= f->o.max_queue ? "the queue is full"
                                                     : NULL;
    r->id = f->next_id++;
    if (refuse || front_req_enqueue(f, r) < 0) {
        f->met.requests[METRICS_END_REJECTED]++;
        pthread_mutex_unlock(&f->mu);
        pthread_cond_destroy(&r->cv);
        free(r->prompt), free(r->out), free(r);
        return respond_error(c, 503, NULL, "%s (%lld requests waiting, --max-queue %lld)",
                             refuse ? refuse : "out of memory", (long long)waiting,
                             (long long)f->o.max_queue);
    }
    k->req = r;
    f->answering++;
    if (!r->stream) return respond_whole(f, c, r);
    r->refs++; /* the stream's */
    pthread_mutex_unlock(&f->mu);
    return respond_stream(f, c, r);
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
    if (!strcmp(url, "/v1/completions"))
        return post ? completions(f, c, k)
                    : respond_error(c, 405, NULL, "use POST for /v1/completions");
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
static void completed(void *cls, struct MHD_Connection *c, void **con_cls,
                      enum MHD_RequestTerminationCode toe) {
    serve_front *f = cls;
    conn *k = *con_cls;
    (void)c;
    if (!k) return;
    if (k->req) {
        pthread_mutex_lock(&f->mu);
        if (k->req->state != REQ_DONE) {
            k->req->gone = 1;
            if (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || k->req->stream)
                front_req_cancel(f, k->req->id);
        }
        front_req_unref(k->req);
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
                            1024u, MHD_OPTION_CONNECTION_TIMEOUT, 120u, MHD_OPTION_END);
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

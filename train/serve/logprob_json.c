/* logprob_json: OpenAI's logprobs fields (see logprob_json.h). */
#include "train/serve/logprob_json.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

/* A token's text: the character below 0x80, else (and for NUL, which cannot be an object's key)
 * OpenAI's "bytes:\xNN". */
static json_t *token_str(int32_t t) {
    char s[16];
    if (t > 0 && t < 0x80) return json_stringn((const char[]){(char)t}, 1);
    snprintf(s, sizeof s, "bytes:\\x%02x", (unsigned)t & 0xffu);
    return json_string(s);
}

/* A log-probability as JSON (−∞, of a token that cannot be drawn, as OpenAI's −9999). */
static json_t *lp_real(float lp) {
    return json_real(isfinite(lp) ? (double)lp : -9999.0);
}

int logprob_parse(json_t *body, front_req *r, int64_t vocab, const char **param, char *err,
                  size_t errlen) {
    const int64_t most = vocab < BATCH_TOP_LOGPROBS_MAX ? vocab : BATCH_TOP_LOGPROBS_MAX;
    json_t *lp = json_object_get(body, *param = "logprobs"), *top = NULL;
    if (!lp || json_is_null(lp) || json_is_false(lp)) lp = NULL;
    if (r->chat) {
        if (lp && !json_is_true(lp))
            return errmsg_fail(err, errlen, "logprobs must be true or false");
        top = json_object_get(body, *param = "top_logprobs");
        if (top && json_is_null(top)) top = NULL;
        if (top && !lp) return errmsg_fail(err, errlen, "top_logprobs needs logprobs: true");
    } else {
        top = lp;
    }
    if (top &&
        (!json_is_integer(top) || json_integer_value(top) < 0 || json_integer_value(top) > most))
        return errmsg_fail(err, errlen, "%s must be an integer in [0, %lld]", *param,
                           (long long)most);
    r->sp.logprobs = lp != NULL;
    r->sp.top_logprobs = top ? (int32_t)json_integer_value(top) : 0;
    return 0;
}

int logprob_alloc(front_req *r) {
    if (!r->sp.logprobs) return 0;
    r->lp = malloc((size_t)r->max_new * (1 + 2 * (size_t)r->sp.top_logprobs) * sizeof *r->lp);
    return r->lp ? 0 : -1;
}

/* A chat token's {"token", "logprob", "bytes"}. */
static json_t *chat_entry(int32_t t, float lp) {
    return json_pack("{s:o, s:o, s:[i]}", "token", token_str(t), "logprob", lp_real(lp), "bytes",
                     (int)t);
}

/* Token i's chat entry with its top_logprobs. */
static json_t *chat_token(const front_req *r, size_t i) {
    const int32_t top = r->sp.top_logprobs;
    const float *rec = r->lp + i * (1 + 2 * (size_t)top);
    json_t *e = chat_entry(r->out[i], rec[0]), *alts = json_array();
    for (int32_t k = 0; k < top && alts; k++)
        json_array_append_new(alts, chat_entry((int32_t)rec[1 + 2 * k], rec[2 + 2 * k]));
    if (!e || !alts || json_object_set_new(e, "top_logprobs", alts) < 0) {
        json_decref(e);
        return NULL;
    }
    return e;
}

/* Token i's completion top_logprobs: the top most likely and the chosen token. */
static json_t *completion_top(const front_req *r, size_t i) {
    const int32_t top = r->sp.top_logprobs;
    const float *rec = r->lp + i * (1 + 2 * (size_t)top);
    json_t *o = json_object();
    for (int32_t k = 0; k <= top && o; k++) {
        const int32_t t = k < top ? (int32_t)rec[1 + 2 * k] : r->out[i];
        json_t *key = token_str(t);
        if (!key || json_object_set_new(o, json_string_value(key),
                                        lp_real(k < top ? rec[2 + 2 * k] : rec[0])) < 0)
            json_decref(o), o = NULL;
        json_decref(key);
    }
    return o;
}

json_t *logprob_json(const front_req *r, size_t from, size_t upto) {
    if (!r->sp.logprobs || !r->lp) return json_null();
    if (r->chat) {
        json_t *content = json_array();
        for (size_t i = from; i < upto && content; i++)
            if (json_array_append_new(content, chat_token(r, i)) < 0)
                json_decref(content), content = NULL;
        return content ? json_pack("{s:o}", "content", content) : NULL;
    }
    json_t *tokens = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    int ok = tokens && lps && tops && offs;
    for (size_t i = from; i < upto && ok; i++) {
        const float *rec = r->lp + i * (1 + 2 * (size_t)r->sp.top_logprobs);
        ok = json_array_append_new(tokens, token_str(r->out[i])) == 0 &&
             json_array_append_new(lps, lp_real(rec[0])) == 0 &&
             json_array_append_new(tops, completion_top(r, i)) == 0 &&
             json_array_append_new(offs, json_integer((json_int_t)i)) == 0;
    }
    if (!ok) {
        json_decref(tokens), json_decref(lps), json_decref(tops), json_decref(offs);
        return NULL;
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", tokens, "token_logprobs", lps,
                     "top_logprobs", tops, "text_offset", offs);
}

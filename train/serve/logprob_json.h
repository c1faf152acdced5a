/* logprob_json: OpenAI's logprobs fields of a completion (front.h), from the records the serving
 * loop stored with each token (logprob.h):
 *   completions, "logprobs": N (0..20) → choices[i].logprobs {"tokens", "token_logprobs",
 *     "top_logprobs" (per token an object token → log-probability: the N most likely, and the
 *     chosen token), "text_offset" (byte offsets in the completion: the characters' for ASCII)};
 *   chat, "logprobs": true, "top_logprobs": N (0..20) → choices[i].logprobs {"content": [{"token",
 *     "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}] (the N most likely)}]}.
 * A token is a byte: its text is the character for 1 to 0x7f, else "bytes:\xNN" (OpenAI's
 * notation for a part of a character; NUL too, which cannot be an object's key), its "bytes" the
 * one byte. Private to http.c. */
#ifndef MT_TRAIN_SERVE_LOGPROB_JSON_H
#define MT_TRAIN_SERVE_LOGPROB_JSON_H
#include <jansson.h>
#include <stddef.h>

#include "train/serve/front_impl.h"

/* The request's logprobs fields into r->sp (and their room in r->lp, once r->max_new is known:
 * logprob_alloc). 0, or −1 with the reason (and the field in *param). */
int logprob_parse(json_t *body, front_req *r, int64_t vocab, const char **param, char *err,
                  size_t errlen);
/* r->lp for r->max_new tokens (when asked for). 0, or −1 out of memory. */
int logprob_alloc(front_req *r);
/* The "logprobs" value of a choice of r covering its tokens [from, upto) (JSON null when the
 * request asked for none; NULL out of memory). */
json_t *logprob_json(const front_req *r, size_t from, size_t upto);
#endif

/* prompts: the batch of texts `meshtrain generate` continues, from --prompt (repeatable) and
 * --prompts FILE (one prompt per line), as byte tokens. Checked up front: no empty prompt, none
 * longer than the cache allows. No MPI; depends on nothing but the byte tokenizer's convention
 * (token = byte). */
#ifndef MT_TRAIN_INFER_PROMPTS_H
#define MT_TRAIN_INFER_PROMPTS_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    int64_t n;     /* prompts */
    int32_t **tok; /* tok[i][0..len[i]) */
    int64_t *len;
    int64_t max_len;
} prompt_set;

/* Not collective. Appends `text` (its bytes) as prompt n. Returns 0, or −1 with the reason in err
 * (an empty prompt, or out of memory). `what` names its origin in messages ("--prompt 2"). */
int prompts_add(prompt_set *ps, const char *text, size_t len, const char *what, char *err,
                size_t errlen);
/* Not collective. Appends every line of `path` (without its "\n" or "\r\n"); an empty line is an
 * error naming the line. Returns 0 or −1 with err. */
int prompts_read_file(prompt_set *ps, const char *path, char *err, size_t errlen);
/* Not collective. Each prompt plus `tokens` new ones must fit the `cap` positions of the cache
 * (rotary tables of --seq-len): −1 with err naming the first that does not. */
int prompts_check_fit(const prompt_set *ps, int64_t tokens, int64_t cap, char *err, size_t errlen);
void prompts_free(prompt_set *ps); /* accepts a zeroed set */
#endif

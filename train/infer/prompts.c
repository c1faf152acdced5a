/* prompts: parsing and checking the prompt batch (see prompts.h). */
#include "train/infer/prompts.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

int prompts_add(prompt_set *ps, const char *text, size_t len, const char *what, char *err,
                size_t errlen) {
    if (len == 0)
        return errmsg_fail(err, errlen,
                           "%s is empty: generation continues a prompt of at least one byte", what);
    int32_t **tok = realloc(ps->tok, (size_t)(ps->n + 1) * sizeof *tok);
    if (tok) ps->tok = tok;
    int64_t *lens = realloc(ps->len, (size_t)(ps->n + 1) * sizeof *lens);
    if (lens) ps->len = lens;
    int32_t *t = malloc(len * sizeof *t);
    if (!tok || !lens || !t) {
        free(t);
        return errmsg_fail(err, errlen, "out of memory reading %s (%zu bytes)", what, len);
    }
    for (size_t i = 0; i < len; i++) t[i] = (unsigned char)text[i];
    ps->tok[ps->n] = t;
    ps->len[ps->n] = (int64_t)len;
    ps->n++;
    if ((int64_t)len > ps->max_len) ps->max_len = (int64_t)len;
    return 0;
}

int prompts_read_file(prompt_set *ps, const char *path, char *err, size_t errlen) {
    FILE *f = fopen(path, "rb");
    if (!f) return errmsg_fail(err, errlen, "--prompts %s: %s", path, strerror(errno));
    char *line = NULL;
    size_t cap = 0;
    int64_t lineno = 0, added = 0;
    int rc = 0;
    for (;;) {
        size_t n = 0;
        int c;
        while ((c = fgetc(f)) != EOF && c != '\n') {
            if (n + 1 >= cap) {
                char *p = realloc(line, cap ? 2 * cap : 256);
                if (!p) {
                    rc = errmsg_fail(err, errlen, "--prompts %s: out of memory", path);
                    break;
                }
                line = p, cap = cap ? 2 * cap : 256;
            }
            line[n++] = (char)c;
        }
        if (rc < 0 || (c == EOF && n == 0)) break;
        lineno++;
        if (n > 0 && line[n - 1] == '\r') n--;
        char what[1100];
        snprintf(what, sizeof what, "--prompts %s: line %lld", path, (long long)lineno);
        if ((rc = prompts_add(ps, line, n, what, err, errlen)) < 0) break;
        added++;
        if (c == EOF) break;
    }
    free(line);
    fclose(f);
    if (rc == 0 && added == 0) rc = errmsg_fail(err, errlen, "--prompts %s holds no prompt", path);
    return rc;
}

int prompts_check_fit(const prompt_set *ps, int64_t tokens, int64_t cap, char *err, size_t errlen) {
    for (int64_t i = 0; i < ps->n; i++) {
        if (ps->len[i] > cap)
            return errmsg_fail(err, errlen,
                               "prompt %lld is %lld bytes, longer than --seq-len %lld (the "
                               "positions the model has rotary angles and the cache room for)",
                               (long long)i + 1, (long long)ps->len[i], (long long)cap);
        if (ps->len[i] + tokens > cap)
            return errmsg_fail(err, errlen,
                               "prompt %lld (%lld bytes) + --tokens %lld = %lld positions, more "
                               "than --seq-len %lld: use fewer --tokens or a larger --seq-len",
                               (long long)i + 1, (long long)ps->len[i], (long long)tokens,
                               (long long)(ps->len[i] + tokens), (long long)cap);
    }
    return 0;
}

void prompts_free(prompt_set *ps) {
    for (int64_t i = 0; i < ps->n; i++) free(ps->tok[i]);
    free(ps->tok);
    free(ps->len);
    memset(ps, 0, sizeof *ps);
}

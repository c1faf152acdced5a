/* text: stop strings and UTF-8 for a completion's bytes (see text.h). */
#include "train/serve/text.h"

#include <string.h>

int64_t text_stop_at_end(const uint8_t *out, size_t n, const text_stops *st) {
    for (int i = 0; i < st->n; i++)
        if (st->len[i] <= n && !memcmp(out + n - st->len[i], st->s[i], st->len[i]))
            return (int64_t)(n - st->len[i]);
    return -1;
}

/* The length of a well-formed character starting at in[0..n): 1–4; 0 when in[0] cannot start
 * one or a byte that follows does not fit; −k when the n bytes present are a valid beginning
 * of a character of k bytes that needs more. */
static int utf8_char(const uint8_t *in, size_t n) {
    const uint8_t c = in[0];
    if (c < 0x80) return 1;
    int k;
    uint8_t lo = 0x80, hi = 0xbf; /* the range of the second byte */
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return 0;
    for (int i = 1; i < k; i++) {
        if ((size_t)i >= n) return -k;
        const uint8_t b = in[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return 0;
    }
    return k;
}

size_t text_sendable(const uint8_t *out, size_t n, const text_stops *st) {
    size_t hold = 0;
    for (int i = 0; i < st->n; i++) /* the longest ending that begins stop string i */
        for (size_t k = st->len[i] - 1; k > hold; k--)
            if (k <= n && !memcmp(out + n - k, st->s[i], k)) {
                hold = k;
                break;
            }
    for (size_t k = 1; k <= 3 && k <= n; k++) /* a character not yet complete */
        if (utf8_char(out + n - k, k) < 0 && k > hold) hold = k;
    return n - hold;
}

size_t text_utf8_clean(char *out, const uint8_t *in, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        const int k = utf8_char(in + i, n - i);
        if (k > 0) {
            memcpy(out + o, in + i, (size_t)k);
            o += (size_t)k, i += (size_t)k;
        } else {
            memcpy(out + o, "\xef\xbf\xbd", 3);
            o += 3, i++;
        }
    }
    out[o] = '\0';
    return o;
}

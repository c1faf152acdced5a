/* text: stop strings and UTF-8 for a completion's bytes (see text.h). */
#include "train/serve/text.h"

#include <string.h>

int64_t text_stop_at_end(const uint8_t *out, size_t n, const text_stops *st) {
    for (int i = 0; i < st->n; i++)
        if (st->len[i] <= n && !memcmp(out + n - st->len[i], st->s[i], st->len[i]))
            return (int64_t)(n - st->len[i]);
    return -1;
}

enum { UTF8_OK, UTF8_INCOMPLETE, UTF8_BAD };

/* The character at in[0..n): returns its length and sets *st: UTF8_OK, a well-formed character;
 * UTF8_INCOMPLETE, all n bytes are a valid beginning of a longer one; UTF8_BAD, the length is
 * the maximal subpart (the longest valid beginning, at least 1 byte), which becomes one U+FFFD
 * (the Unicode standard's practice, as browsers' and Python's decoders do). */
static size_t utf8_scan(const uint8_t *in, size_t n, int *st) {
    const uint8_t c = in[0];
    size_t k;
    uint8_t lo = 0x80, hi = 0xbf; /* the range of the second byte */
    *st = UTF8_OK;
    if (c < 0x80) return 1;
    if (c >= 0xc2 && c <= 0xdf)
        k = 2;
    else if (c >= 0xe0 && c <= 0xef)
        k = 3, lo = c == 0xe0 ? 0xa0 : 0x80, hi = c == 0xed ? 0x9f : 0xbf;
    else if (c >= 0xf0 && c <= 0xf4)
        k = 4, lo = c == 0xf0 ? 0x90 : 0x80, hi = c == 0xf4 ? 0x8f : 0xbf;
    else
        return *st = UTF8_BAD, 1;
    for (size_t i = 1; i < k; i++) {
        if (i >= n) return *st = UTF8_INCOMPLETE, i;
        const uint8_t b = in[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xbf)) return *st = UTF8_BAD, i;
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
    for (size_t k = 1; k <= 3 && k <= n; k++) { /* a character not yet complete */
        int state;
        if (utf8_scan(out + n - k, k, &state) == k && state == UTF8_INCOMPLETE && k > hold)
            hold = k;
    }
    return n - hold;
}

size_t text_utf8_clean(char *out, const uint8_t *in, size_t n) {
    size_t o = 0;
    for (size_t i = 0; i < n;) {
        int st;
        const size_t k = utf8_scan(in + i, n - i, &st);
        if (st == UTF8_OK)
            memcpy(out + o, in + i, k), o += k;
        else
            memcpy(out + o, "\xef\xbf\xbd", 3), o += 3;
        i += k;
    }
    out[o] = '\0';
    return o;
}

/* text: what a completion's bytes may be sent as, one token (= byte) at a time. The model's bytes
 * need not be UTF-8, and JSON strings must be: invalid bytes become U+FFFD, and a stream holds
 * back the end of a multi-byte character until it is complete, so that a streamed text is the
 * same as the whole text sent at once. Stop strings end a completion where they first occur (the
 * text excludes them), so a stream also holds back an ending that may yet become a stop string.
 * Pure: no MPI, no allocation. */
#ifndef MT_TRAIN_SERVE_TEXT_H
#define MT_TRAIN_SERVE_TEXT_H
#include <stddef.h>
#include <stdint.h>

#define TEXT_MAX_STOPS 4
#define TEXT_MAX_STOP_LEN 64

typedef struct {
    int n;
    size_t len[TEXT_MAX_STOPS];
    uint8_t s[TEXT_MAX_STOPS][TEXT_MAX_STOP_LEN];
} text_stops;

/* The index at which a stop string ends out[0..n) (n − its length), or −1: called after each
 * byte appended, it finds a stop string's first occurrence. */
int64_t text_stop_at_end(const uint8_t *out, size_t n, const text_stops *st);
/* How many bytes out[0..n) may be sent while more may follow: all but the longest ending that is
 * a proper prefix of a stop string or of a UTF-8 character. */
size_t text_sendable(const uint8_t *out, size_t n, const text_stops *st);
/* in[0..n) as valid UTF-8 into out (room for 3·n + 1 bytes): each maximal subpart of an
 * ill-formed sequence (RFC 3629: no overlong forms, no surrogates, nothing past U+10FFFF) becomes
 * one U+FFFD, as the Unicode standard recommends and browsers and Python decode. Returns the
 * length; out is terminated. */
size_t text_utf8_clean(char *out, const uint8_t *in, size_t n);
#endif

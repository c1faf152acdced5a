/* The completion text's UTF-8 and stop strings (train/serve/text.h):
 *  - known ill-formed sequences give one U+FFFD per maximal subpart (the Unicode standard's
 *    practice, which Python's and browsers' decoders follow);
 *  - on 20000 random byte strings (mostly UTF-8 pieces, some garbage) with random stop strings,
 *    a stream that sends text_sendable's prefix after each byte, each chunk cleaned on its own,
 *    gives exactly the whole text cleaned at once up to the first stop string, and every chunk is
 *    well-formed UTF-8. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "check.h"
#include "train/serve/text.h"

static uint64_t rs = 77;
static uint32_t rnd(void) {
    rs = rs * 6364136223846793005ULL + 1442695040888963407ULL;
    return (uint32_t)(rs >> 33);
}

static int known(const char *in, const char *want) {
    char out[256];
    text_utf8_clean(out, (const uint8_t *)in, strlen(in));
    if (!strcmp(out, want)) return 0;
    printf("  clean(");
    for (const char *p = in; *p; p++) printf("%02x", (unsigned char)*p);
    printf(") gave %s\n", out);
    return 1;
}

/* A random piece: ASCII, a valid character of 2-4 bytes, a truncated one, or a random byte. */
static size_t piece(uint8_t *o) {
    static const char *const valid[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80", "\xed\x9f\xbf"};
    const uint32_t k = rnd() % 10;
    if (k < 5) return o[0] = (uint8_t)(32 + rnd() % 95), 1;
    const char *v = valid[rnd() % 4];
    size_t n = strlen(v);
    if (k == 8) n = 1 + rnd() % (n - 1);
    if (k == 9) return o[0] = (uint8_t)(rnd() % 256), 1;
    memcpy(o, v, n);
    return n;
}

int main(void) {
    int bad = 0;
    bad += known("ab", "ab");
    bad += known("\xe2\x82x", "\xef\xbf\xbdx");
    bad += known("\xf0\x80", "\xef\xbf\xbd\xef\xbf\xbd");
    bad += known("\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    bad += known("\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd");
    bad += known("\xf4\x90\x80\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd");
    bad += known("\xf0\x9f\x98", "\xef\xbf\xbd");
    bad += known("\xe2\x82\xac\xff", "\xe2\x82\xac\xef\xbf\xbd");
    check_expect(bad == 0, "8 known sequences: one U+FFFD per maximal subpart (%d wrong)", bad);
    int wrong = 0, malformed = 0;
    for (int t = 0; t < 20000; t++) {
        uint8_t all[400];
        size_t n = 0;
        while (n < 300) n += piece(all + n);
        text_stops st = {.n = (int)(rnd() % 3)};
        for (int i = 0; i < st.n; i++) { /* well-formed (JSON strings are): from the text's
                                            * ASCII, or whole characters */
            st.len[i] = 0;
            for (int k = 1 + (int)(rnd() % 2); k > 0; k--) {
                uint8_t p[4];
                size_t pn = piece(p);
                int state_ok = 1;
                char chk[16];
                if (text_utf8_clean(chk, p, pn) != pn || !memcmp(chk, "\xef\xbf\xbd", 3))
                    state_ok = 0;
                if (rnd() % 2) { /* an ASCII byte of the text */
                    const size_t at = rnd() % n;
                    if (all[at] < 0x80) p[0] = all[at], pn = 1, state_ok = 1;
                }
                if (!state_ok) continue;
                memcpy(st.s[i] + st.len[i], p, pn);
                st.len[i] += pn;
            }
            if (st.len[i] == 0) st.s[i][0] = 'e', st.len[i] = 1;
        }
        char streamed[2000] = "", chunk[1300];
        size_t sent = 0, len = 0, cut = n;
        for (size_t i = 1; i <= n; i++) {
            const int64_t at = text_stop_at_end(all, i, &st);
            const size_t upto = at >= 0 ? (size_t)at : i == n ? n : text_sendable(all, i, &st);
            if (upto > sent) {
                const size_t c = text_utf8_clean(chunk, all + sent, upto - sent);
                char again[4000]; /* a well-formed chunk is its own cleaning */
                if (text_utf8_clean(again, (const uint8_t *)chunk, c) != c || strcmp(again, chunk))
                    malformed++;
                memcpy(streamed + len, chunk, c + 1);
                len += c, sent = upto;
            }
            if (at >= 0) {
                cut = (size_t)at;
                break;
            }
        }
        char whole[1300];
        text_utf8_clean(whole, all, cut);
        if (strcmp(whole, streamed) && wrong++ < 3)
            printf("  trial %d: streamed text differs from the whole text\n", t);
    }
    check_expect(wrong == 0 && malformed == 0,
                 "20000 random texts with stop strings: streamed chunks = the whole text (%d "
                 "differ), every chunk well-formed (%d not)",
                 wrong, malformed);
    return check_finish("test_text");
}

/* kvroute: the kv heads' routes between two tensor shardings (see kvroute.h). */
#include "train/serve/kvroute.h"

int kvroute_holds(const kvroute_side *sd, int64_t y) {
    return sd->Z <= 1 || y % sd->Z == sd->z;
}

int64_t kvroute_heads_held(const model_shape *s, const kvroute_side *sd) {
    int64_t n = 0;
    for (int64_t y = 0; y < sd->Y; y++) {
        int64_t k0, kl;
        model_tensor_kv_heads(s, sd->Y, y, &k0, &kl);
        n += kvroute_holds(sd, y) ? kl : 0;
    }
    return n;
}

int32_t kvroute_pieces(const model_shape *s, const kvroute_side *src, const kvroute_side *dst,
                       int64_t yd, kvroute_piece *out) {
    if (!kvroute_holds(dst, yd)) return 0;
    int64_t a, n;
    model_tensor_kv_heads(s, dst->Y, yd, &a, &n);
    if (src->Y == dst->Y && kvroute_holds(src, yd)) {
        out[0] = (kvroute_piece){(int32_t)yd, a, a + n};
        return 1;
    }
    const int64_t b = a + n;
    int32_t np = 0;
    int64_t held = 0; /* heads [0, held) are held by a lower source coordinate */
    for (int64_t k = 0; k < src->Y; k++) {
        if (!kvroute_holds(src, k)) continue;
        int64_t c, m;
        model_tensor_kv_heads(s, src->Y, k, &c, &m);
        const int64_t lo = c > held ? c : held, hi = c + m; /* the heads k is first to hold */
        const int64_t h0 = lo > a ? lo : a, h1 = hi < b ? hi : b;
        if (h1 > h0) out[np++] = (kvroute_piece){(int32_t)k, h0, h1};
        if (hi > held) held = hi;
    }
    return np;
}

/* kvroute: the kv heads' routes between two tensor shardings (see kvroute.h). */
#include "train/serve/kvroute.h"

int32_t kvroute_pieces(const model_shape *s, int64_t Ys, int64_t Yd, int64_t yd,
                       kvroute_piece *out) {
    int64_t a, n;
    model_tensor_kv_heads(s, Yd, yd, &a, &n);
    if (Ys == Yd) {
        out[0] = (kvroute_piece){(int32_t)yd, a, a + n};
        return 1;
    }
    const int64_t b = a + n;
    int32_t np = 0;
    int64_t held = 0; /* heads [0, held) are held by a lower source coordinate */
    for (int64_t k = 0; k < Ys; k++) {
        int64_t c, m;
        model_tensor_kv_heads(s, Ys, k, &c, &m);
        const int64_t lo = c > held ? c : held, hi = c + m; /* the heads k is first to hold */
        const int64_t h0 = lo > a ? lo : a, h1 = hi < b ? hi : b;
        if (h1 > h0) out[np++] = (kvroute_piece){(int32_t)k, h0, h1};
        if (hi > held) held = hi;
    }
    return np;
}

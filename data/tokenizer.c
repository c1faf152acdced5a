/* tokenizer: see tokenizer.h. */
#include "data/tokenizer.h"

void tok_encode(int32_t *out, const char *text, int64_t n) {
    for (int64_t i = 0; i < n; i++) out[i] = (unsigned char)text[i];
}

int tok_decode(char *out, const int32_t *tokens, int64_t n) {
    for (int64_t i = 0; i < n; i++) {
        if (tokens[i] < 0 || tokens[i] >= TOK_VOCAB_SIZE) return -1;
        out[i] = (char)(unsigned char)tokens[i];
    }
    return 0;
}

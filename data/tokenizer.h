/* tokenizer: the byte-level tokenizer. A token is a byte value, so V = 256, every byte string
 * encodes and every token sequence in [0, 256) decodes, and decode(encode(s)) = s. Pure functions,
 * no state. Depends on nothing. */
#ifndef MT_DATA_TOKENIZER_H
#define MT_DATA_TOKENIZER_H
#include <stdint.h>

#define TOK_NAME "byte"
#define TOK_VOCAB_SIZE 256

/* Not collective. out[i] = (unsigned char)text[i], i < n. Overwrites out. */
void tok_encode(int32_t *out, const char *text, int64_t n);
/* Not collective. out[i] = (char)tokens[i], i < n (out is not null-terminated). Returns 0, or -1
 * (out unspecified) if some token lies outside [0, V). */
int tok_decode(char *out, const int32_t *tokens, int64_t n);
#endif

/* tokens_order: the order in which a token file's training windows are read (--data-order), on
 * its own so that the flags (train/config) name it without seeing the token files' API. The
 * formulas of both orders are in tokens.h. No dependencies. */
#ifndef MT_DATA_TOKENS_ORDER_H
#define MT_DATA_TOKENS_ORDER_H

typedef enum { TOKENS_ORDER_RANDOM = 0, TOKENS_ORDER_SEQUENTIAL = 1 } tokens_order;

/* "random" / "sequential"; the parse returns -1 for any other name. */
const char *tokens_order_name(tokens_order order);
int tokens_order_parse(const char *name);
#endif

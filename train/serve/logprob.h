/* logprob: a token's log-probability and the most likely alternatives, as OpenAI's logprobs
 * report them. The distribution is the model's own: log-softmax of the raw logits (temperature 1,
 * no top-k cut), what vLLM reports by default; temperature and top-k change which token is drawn,
 * not the log-probabilities reported. The log-sum-exp is summed in double, each value rounded to
 * fp32 once. Pure: no MPI. */
#ifndef MT_TRAIN_SERVE_LOGPROB_H
#define MT_TRAIN_SERVE_LOGPROB_H
#include <stdint.h>

/* rec[1 + 2·top] = [log p(token), id_1, log p(id_1), ..., id_top, log p(id_top)]: the top most
 * likely tokens of logits[V], in decreasing order (ties to the lower id; ids as floats, exact
 * below 2^24). Non-finite logits count as −∞. scratch: V ints. */
void logprob_record(float *rec, const float *logits, int64_t V, int32_t token, int32_t top,
                    int32_t *scratch);
#endif

/* chat: the chat template of POST /v1/chat/completions over the byte tokenizer. A conversation
 * becomes one prompt, each message a line and the assistant's turn left open:
 *
 *     system: You answer in verse.\n
 *     user: Who art thou?\n
 *     assistant:
 *
 * i.e. for each message "ROLE: CONTENT\n" (ROLE system, user or assistant, CONTENT its text),
 * then "assistant:", which the model continues. The completion is the assistant's reply; its
 * tokens are those `meshtrain generate --prompt` gives the same prompt. Pure: no MPI. */
#ifndef MT_TRAIN_SERVE_CHAT_H
#define MT_TRAIN_SERVE_CHAT_H
#include <stddef.h>

#include <jansson.h>

/* The prompt of `messages` (a JSON array of {"role", "content": a string}) into *out (malloc'd,
 * *n bytes, terminated). 0, or −1 with the reason in err (not an array, no message, a role or
 * content that is not one of those above, out of memory). */
int chat_render(const json_t *messages, char **out, size_t *n, char *err, size_t errlen);
#endif

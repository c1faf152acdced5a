/* chat: the chat template (see chat.h). */
#include "train/serve/chat.h"

#include <stdlib.h>
#include <string.h>

#include "mesh/errmsg.h"

#define CHAT_OPEN "assistant:"

int chat_render(const json_t *messages, char **out, size_t *n, char *err, size_t errlen) {
    static const char *const roles[] = {"system", "user", "assistant"};
    *out = NULL, *n = 0;
    if (!json_is_array(messages) || json_array_size(messages) == 0)
        return errmsg_fail(err, errlen, "messages must be a non-empty array");
    size_t len = strlen(CHAT_OPEN);
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        int known = 0;
        for (int k = 0; k < 3 && json_is_string(role); k++)
            known |= !strcmp(json_string_value(role), roles[k]);
        if (!json_is_object(m) || !known)
            return errmsg_fail(err, errlen,
                               "messages[%zu]: expected an object with a role of system, user or "
                               "assistant",
                               i);
        if (!json_is_string(content))
            return errmsg_fail(err, errlen, "messages[%zu].content must be a string", i);
        len += json_string_length(role) + 2 + json_string_length(content) + 1;
    }
    char *p = malloc(len + 1);
    if (!p) return errmsg_fail(err, errlen, "out of memory");
    size_t at = 0;
    for (size_t i = 0; i < json_array_size(messages); i++) {
        const json_t *m = json_array_get(messages, i);
        const json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        memcpy(p + at, json_string_value(role), json_string_length(role));
        at += json_string_length(role);
        memcpy(p + at, ": ", 2), at += 2;
        memcpy(p + at, json_string_value(content), json_string_length(content));
        at += json_string_length(content);
        p[at++] = '\n';
    }
    memcpy(p + at, CHAT_OPEN, strlen(CHAT_OPEN) + 1);
    *out = p, *n = len;
    return 0;
}

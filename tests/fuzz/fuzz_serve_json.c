/* fuzz_serve_json.c — the JSON recognizer of serve's response_format json_object (src/serve/serve_json.c): any
 * bytes fed at once or one by one end in the same verdict, the text is complete at most once and only at its end,
 * and a text it accepts as complete is a JSON object by jansson (an independent parser; numbers out of a double's
 * range aside, which jansson refuses and JSON allows). */
#include <jansson.h>
#include <string.h>
#include "fuzz_common.h"
#include "serve/serve_json.h"

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    fuzz_quiet();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    qf_json_state a, b;
    qf_json_start(&a), qf_json_start(&b);
    const int whole = qf_json_feed(&a, data, n);
    int bytes = 0;
    for (size_t i = 0; i < n && !bytes; i++) {
        bytes = qf_json_feed(&b, data + i, 1);
        qf_json_state next = b;
        if (!bytes && qf_json_done(&b) && i + 1 < n && qf_json_feed(&next, data + i + 1, 1) == 0)
            abort(); /* complete, then another byte accepted */
    }
    if (whole != bytes) abort();
    if (whole || !qf_json_done(&a)) return 0;
    json_error_t je;
    json_t *j = json_loadb((const char *)data, n, JSON_ALLOW_NUL | JSON_DECODE_INT_AS_REAL, &je);
    if (!j && !strstr(je.text, "overflow")) abort();
    if (j && !json_is_object(j)) abort();
    json_decref(j);
    return 0;
}

/* page: the small web page `meshtrain serve` answers at / (as llama.cpp's server has one): type a
 * prompt, set max_tokens, temperature, top-k and seed, and watch the completion stream in
 * through POST /v1/completions with "stream": true. The query string may fill the form and start
 * it (?prompt=...&max_tokens=...&temperature=...&top_k=...&seed=...&autorun=1); when the stream
 * ends the page sets data-done="1" on <body> and the text is in #out (what a headless browser
 * test reads). Static text, no dependencies. */
#ifndef MT_TRAIN_SERVE_PAGE_H
#define MT_TRAIN_SERVE_PAGE_H
extern const char serve_page_html[];
#endif

/* serve_cli: `meshtrain serve` — flags, checkpoint, the engine on every rank, the HTTP front on
 * rank 0, and the serving loop with its report (stderr: a line every few seconds with tokens/s,
 * the KV pool, the prefix cache and the measured step time beside the book's roofline) and its
 * shutdown: on SIGTERM or SIGINT rank 0 refuses new requests (503), lets the running ones finish
 * for up to --drain seconds, ends the rest with an error, and every rank exits 0. Depends on
 * front, engine, batcher, loop, ckpt, config, mesh. */
#ifndef MT_TRAIN_SERVE_SERVE_CLI_H
#define MT_TRAIN_SERVE_SERVE_CLI_H

/* Collective over: world. `meshtrain serve ...` (argv[0] = "serve"). Returns the exit status;
 * bad input leaves through mesh_exit_error (one message, status 2). */
int serve_main(int argc, char **argv);
#endif

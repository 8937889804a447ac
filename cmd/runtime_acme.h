/*
 * runtime_acme.h: a generation's ACME clients, one per server with
 * acme_certificate: made before the sites' TLS is loaded (so that a
 * placeholder is there to load), started on the main loop with the
 * generation, stopped when it is replaced.
 */
#ifndef CORRAL_CMD_RUNTIME_ACME_H
#define CORRAL_CMD_RUNTIME_ACME_H

#include "cmd/daemon.h"

/* Makes the clients of `config`'s servers; an issuer not found, or a
 * state_path that cannot be written, is logged and fails.  Returns 0 or
 * -errno. */
int runtime_acme_new(const struct conf_config *config, struct runtime_acme **out);
/* The file $acme_certificate and $acme_certificate_key stand for in
 * `server`, or NULL when it has no acme_certificate. */
const char *runtime_acme_path(const struct runtime_acme *acme, const struct conf_server *server);
/* Starts ordering and renewing on `loop` (the main loop). */
int runtime_acme_start(struct runtime_acme *acme, corral_loop *loop);
/* Stops them, on that loop's thread: the next generation's take over. */
void runtime_acme_stop(struct runtime_acme *acme);
void runtime_acme_free(struct runtime_acme *acme);

#endif

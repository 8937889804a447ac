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
/* Adds the certificates issued and the orders failed, stopped clients'
 * too, to *issued and *failures (for /metrics); `acme` may be NULL. */
void runtime_acme_totals(struct runtime_acme *acme, uint64_t *issued, uint64_t *failures);
/* Client `i`'s certificate: its name (cut to name_len) and notAfter (0:
 * none issued yet).  False when it is not running, or past the last. */
bool runtime_acme_expiry(struct runtime_acme *acme, size_t i, char *name, size_t name_len,
                         int64_t *not_after);
void runtime_acme_free(struct runtime_acme *acme);

#endif

/*
 * generation.h: the life of generations (generation.c): start, reload,
 * stop, and the daemon's exit status.  Main thread only; the list in
 * daemon_state changes under its lock for the admin endpoints to read.
 */
#ifndef CORRAL_CMD_GENERATION_H
#define CORRAL_CMD_GENERATION_H

#include "cmd/daemon.h"

/* Sets the main loop: generations report their exit to it, and it stops
 * once the last one has exited after stop_all().  Call before anything
 * below. */
void generations_init(corral_loop *loop);

/* 0, or 1 once the daemon stops because it cannot serve (the newest
 * generation's workers all stopped, or a reload lost the sockets). */
int generations_exit_status(void);

/* Loads the configuration at `path` (NULL: the built-in one) and checks that
 * the daemon can serve it.  Returns 0 with *out set, or -EINVAL (logged). */
int load_config(const char *path, struct conf_config **out);

/* Starts a generation from `config`, which it takes in every case, on the
 * sockets of `previous` (NULL: none) where it can.  Does not add it to
 * daemon_state.generations.  Returns 0 with *out set, or -errno (logged
 * where understood). */
int generation_start(struct conf_config *config, struct generation *previous,
                     struct generation **out);

/* Logs the worker count and how the wakeup mode resolved. */
void log_wakeup(const struct generation *gen);

/* SIGHUP: reloads the configuration into a new generation and drains the
 * previous one; on failure the previous one keeps serving, or the daemon
 * stops when it can no longer accept.  The service manager sees RELOADING,
 * then READY. */
void reload(void);

/* Closes the sockets passed in (by systemd or the process this one
 * upgrades) that the newest generation does not use, once what they
 * queued is handed to it.  After a start or a reload. */
void generations_release_passed(void);

/* A binary upgrade's new process serves: from now on, stopping hands it
 * the idle plain connections over `channel` (a unix socket) instead of
 * closing them. */
void generations_pass_to(int channel);

/* Tells the service manager `state` (newline-terminated assignments, or
 * "") with a STATUS line: the newest generation and the open connections. */
void generations_notify(const char *state);

/* Stops every generation within `graceful_ms`; the main loop ends when the
 * last has exited, or now if none is left. */
void stop_all(uint32_t graceful_ms);

#endif

/*
 * process.h: the daemon's process set-up (process.c): socket activation,
 * the open files limit, the privilege drop and the pid file.  Main thread.
 */
#ifndef CORRAL_CMD_PROCESS_H
#define CORRAL_CMD_PROCESS_H

#include "conf/config.h"

/* systemd socket activation: when LISTEN_PID is this process, takes the
 * LISTEN_FDS sockets from descriptor 3 on (made close-on-exec) and unsets
 * the variables.  Call before anything else opens a descriptor. */
void collect_activated_sockets(void);

/* The descriptor of the socket systemd passed for `address` (the same
 * address as the kernel reports it, whatever the spelling), or NULL.  Valid
 * until activated_sockets_close(). */
const int *activated_socket_find(const char *address);

/* Closes the sockets systemd passed, once no generation will take them
 * over, and forgets them.  Called again, does nothing. */
void activated_sockets_close(void);

/* Raises the open files limit toward what `workers` workers with the
 * configured max_connections need, within the hard limit (a shortfall is
 * logged, not an error). */
void raise_fd_limit(const struct conf_config *config, unsigned workers);

/* Switches to the configured user and group, if any.  Returns 0 or -1
 * (logged). */
int drop_privileges(const struct conf_config *config);

/* Writes this process's pid to `path`.  Returns 0 or -1 (logged). */
int write_pid_file(const char *path);

/* Forks, before any thread exists, the process that removes the pid file at
 * `path` once this one ends, for when privileges will be dropped.  Returns 0
 * or -errno (logged). */
int pid_file_keeper_start(const char *path);

/* Removes the pid file at `path` if it still holds this process's pid:
 * through the keeper if there is one.  Failures are logged. */
void pid_file_release(const char *path);

#endif

/*
 * process.h: the daemon's process set-up (process.c): socket activation,
 * the open files limit, the privilege drop and the pid file.  Main thread.
 */
#ifndef CORRAL_CMD_PROCESS_H
#define CORRAL_CMD_PROCESS_H

#include "conf/config.h"

#include <sys/types.h>

/* systemd socket activation, or sockets from the process this one
 * upgrades: when LISTEN_PID is this process, takes the LISTEN_FDS sockets
 * from descriptor 3 on (made close-on-exec) and unsets the variables.  Call
 * before anything else opens a descriptor. */
void collect_activated_sockets(void);

/* The sockets passed for `address` (the same address as the kernel reports
 * it, whatever the spelling): sets *fds to them and returns how many (a
 * SO_REUSEPORT group passed whole, in its order), or 0.  Valid until
 * activated_sockets_close(). */
unsigned activated_sockets_find(const char *address, const int **fds);
/* The same for datagram sockets (stream udp listens). */
unsigned activated_udp_sockets_find(const char *address, const int **fds);

/* Whether the passed socket `fd`, bound to `address` (as the kernel reports
 * it), can be closed; `udp`: a datagram socket; `upgraded`: the process
 * this one upgrades passed it, not systemd. */
typedef bool activated_unused_fn(int fd, const char *address, bool udp, bool upgraded, void *arg);

/* Closes and forgets each passed socket for which `unused` says so. */
void activated_sockets_release(activated_unused_fn *unused, void *arg);

/* Closes the passed sockets, once no generation will take them over, and
 * forgets them.  Called again, does nothing. */
void activated_sockets_close(void);

/* Raises the open files limit toward what `workers` workers with the
 * configured max_connections (and the stream udp listens' sessions) need,
 * within the hard limit (a shortfall is logged, not an error). */
void raise_fd_limit(const struct conf_config *config, unsigned workers);

/* Switches to the configured user and group, if any.  Started as root,
 * the calling thread keeps the right to read any file (for reloads, see
 * privileged_reads()).  Returns 0 or -1 (logged). */
int drop_privileges(const struct conf_config *config);

/* Turns the right to read any file kept by drop_privileges() on or off
 * for the calling thread: on while a reload reads its configuration,
 * certificates and keys, off before it starts workers.  Nothing without
 * a privilege drop. */
void privileged_reads(bool on);

/* Writes this process's pid to `path`.  Returns 0 or -1 (logged). */
int write_pid_file(const char *path);

/* Forks, before any thread exists, the process that removes the pid file at
 * `path` once this one ends, for when privileges will be dropped.  Returns 0
 * or -errno (logged). */
int pid_file_keeper_start(const char *path);

/* Removes the pid file at `path` if it still holds this process's pid:
 * through the keeper if there is one.  Failures are logged. */
void pid_file_release(const char *path);

/* Binary upgrade (SIGUSR2).  Remembers the binary this process was started
 * from, as an absolute path (/proc/self/exe names the old file once a new
 * one is installed over it), and its arguments, which must outlive it. */
void remember_binary(char **argv);

/* The path remember_binary() found, or NULL. */
const char *binary_started_from(void);

/* Starts the remembered binary with the same arguments, passing it the
 * listening sockets `fds` the systemd way (LISTEN_FDS) and `report_fd`, a
 * unix socket, for upgrade_report_ready() (CORRAL_UPGRADE_FD).  Returns 0 with *pid set, or
 * -errno (fork).  A failed exec shows as the child's exit status 127. */
int upgrade_spawn(const int *fds, unsigned count, int report_fd, pid_t *pid);

/* In the new process: the socket to report on, if this process was started
 * by an upgrade (else -1); the caller owns it.  Call early, with
 * collect_activated_sockets(). */
int upgrade_collect_report(void);

/* In the new process, once it serves: tells the process it upgrades, which
 * then passes its idle connections on that socket and stops. */
void upgrade_report_ready(int fd);

#endif

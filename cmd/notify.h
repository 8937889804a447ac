/*
 * notify.h: telling a service manager (systemd's Type=notify) how the daemon
 * is doing (notify.c): ready, reloading, stopping, a status line, and which
 * process is the daemon after a binary upgrade.  Main thread.
 */
#ifndef CORRAL_CMD_NOTIFY_H
#define CORRAL_CMD_NOTIFY_H

#include <stdbool.h>

/* Connects to the socket $NOTIFY_SOCKET names (a path, or "@name" for an
 * abstract one), if any: before the privilege drop, which may take the
 * right to connect away.  The variable stays set for a binary upgrade's new
 * process.  A failure is logged, and notifications are then not sent. */
void notify_open(void);

/* Whether there is a service manager to notify. */
bool notify_enabled(void);

/* Sends one notification: newline-separated VARIABLE=value assignments
 * (READY=1, STATUS=..., see sd_notify(3)), printf-style.  Nothing without a
 * service manager; a failure is logged once. */
void notify_send(const char *format, ...) __attribute__((format(printf, 1, 2)));

/* RELOADING=1 with MONOTONIC_USEC=now, as systemd 253's Type=notify-reload
 * requires. */
void notify_reloading(void);

void notify_close(void);

#endif

/*
 * process.c: the daemon's process set-up: sockets passed by systemd
 * (LISTEN_FDS), the open files limit, the privilege drop (keeping the
 * right to read root's files for reloads), and the pid file with the
 * process that removes it once privileges are gone.
 */
#include "cmd/process.h"
#include "cmd/runtime.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <linux/capability.h>
#include <netinet/in.h>
#include <limits.h>
#include <pwd.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

extern char **environ;

/* Sockets passed by systemd or by the process this one upgrades
 * (LISTEN_FDS), in the order passed, with their bound addresses: a
 * SO_REUSEPORT group's sockets are next to each other, in its order. */
struct activated_socket {
    char address[128];
    bool udp; /* a datagram socket: a stream udp listen's */
};
static struct activated_socket *activated;
static int *activated_fds;
static size_t activated_count;
static bool activated_by_upgrade; /* the process this one upgrades passed them, not systemd */

/* systemd socket activation: LISTEN_PID is us, LISTEN_FDS sockets from 3. */
void collect_activated_sockets(void)
{
    const char *pid = getenv("LISTEN_PID"), *fds = getenv("LISTEN_FDS");
    if (pid == NULL || fds == NULL || atol(pid) != (long)getpid())
        return;
    int count = atoi(fds);
    activated_by_upgrade = getenv("CORRAL_UPGRADE_FD") != NULL;
    size_t slots = (size_t)(count > 0 ? count : 1);
    activated = calloc(slots, sizeof(*activated));
    activated_fds = calloc(slots, sizeof(*activated_fds));
    if (activated == NULL || activated_fds == NULL) {
        free(activated);
        free(activated_fds);
        activated = NULL;
        activated_fds = NULL;
    }
    for (int i = 0; activated != NULL && i < count; i++) {
        int fd = 3 + i;
        struct sockaddr_storage addr;
        socklen_t len = sizeof(addr);
        if (getsockname(fd, (struct sockaddr *)&addr, &len) != 0 ||
            corral_format_address((struct sockaddr *)&addr, len, activated[activated_count].address,
                                  sizeof(activated[activated_count].address)) != 0)
            continue;
        int type = 0;
        socklen_t type_len = sizeof(type);
        activated[activated_count].udp =
            getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &type_len) == 0 && type == SOCK_DGRAM;
        fcntl(fd, F_SETFD, FD_CLOEXEC);
        activated_fds[activated_count++] = fd;
        log_info("socket activation: %s%s (fd %d)", activated[activated_count - 1].address,
                 activated[activated_count - 1].udp ? " udp" : "", fd);
    }
    unsetenv("LISTEN_PID");
    unsetenv("LISTEN_FDS");
    unsetenv("LISTEN_FDNAMES");
}

/* Whether the passed socket bound to `bound` serves `address`, which has
 * port 0: any port on the same host (the one the process before picked). */
static bool same_host(const char *bound, const char *address)
{
    struct sockaddr_storage a, b;
    socklen_t a_len, b_len;
    if (corral_parse_address(address, &a, &a_len) != 0 ||
        corral_parse_address(bound, &b, &b_len) != 0 || a.ss_family != b.ss_family)
        return false;
    if (a.ss_family == AF_INET) {
        const struct sockaddr_in *x = (const void *)&a, *y = (const void *)&b;
        return x->sin_port == 0 && x->sin_addr.s_addr == y->sin_addr.s_addr;
    }
    if (a.ss_family == AF_INET6) {
        const struct sockaddr_in6 *x = (const void *)&a, *y = (const void *)&b;
        return x->sin6_port == 0 && memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
    }
    return false;
}

/* The passed sockets of one kind (stream or datagram) for `address`. */
static unsigned sockets_find(const char *address, bool udp, const int **fds)
{
    size_t i = 0;
    while (i < activated_count &&
           !(activated[i].udp == udp && conf_same_address(activated[i].address, address)))
        i++;
    if (i == activated_count)
        for (i = 0; i < activated_count &&
                    !(activated[i].udp == udp && same_host(activated[i].address, address));
             i++)
            ;
    if (i == activated_count)
        return 0;
    size_t n = 1;
    while (i + n < activated_count && activated[i + n].udp == udp &&
           strcmp(activated[i + n].address, activated[i].address) == 0)
        n++;
    *fds = &activated_fds[i];
    return (unsigned)n;
}

unsigned activated_sockets_find(const char *address, const int **fds)
{
    return sockets_find(address, false, fds);
}

unsigned activated_udp_sockets_find(const char *address, const int **fds)
{
    return sockets_find(address, true, fds);
}

void activated_sockets_release(activated_unused_fn *unused, void *arg)
{
    size_t kept = 0;
    for (size_t i = 0; i < activated_count; i++) {
        if (unused(activated_fds[i], activated[i].address, activated[i].udp, activated_by_upgrade,
                   arg)) {
            log_info("closing %s (fd %d): passed in, no longer used", activated[i].address,
                     activated_fds[i]);
            close(activated_fds[i]);
            continue;
        }
        /* In order: a group's sockets stay next to each other. */
        activated[kept] = activated[i];
        activated_fds[kept++] = activated_fds[i];
    }
    activated_count = kept;
}

void activated_sockets_close(void)
{
    for (size_t i = 0; i < activated_count; i++)
        close(activated_fds[i]);
    free(activated);
    free(activated_fds);
    activated = NULL;
    activated_fds = NULL;
    activated_count = 0;
}

/* Enough descriptors for every worker's connections, twice over for
 * proxied ones, within the hard limit. */
void raise_fd_limit(const struct conf_config *config, unsigned workers)
{
    struct rlimit limit;
    if (getrlimit(RLIMIT_NOFILE, &limit) != 0)
        return;
    rlim_t clients = (rlim_t)workers * (config->max_connections ? config->max_connections : 1024);
    /* Each UDP session of a stream udp listen holds a socket to its
     * server, up to STREAM_UDP_SESSIONS_MAX per listen and worker. */
    rlim_t udp_listens = 0;
    for (size_t s = 0; s < config->stream.server_count; s++)
        for (size_t l = 0; l < config->stream.servers[s].listen_count; l++)
            udp_listens += config->stream.servers[s].listens[l].udp;
    rlim_t wanted = clients * 2 + 256 + udp_listens * workers * STREAM_UDP_SESSIONS_MAX;
    if (limit.rlim_cur >= wanted)
        return;
    rlim_t target = wanted < limit.rlim_max ? wanted : limit.rlim_max;
    limit.rlim_cur = target;
    if (setrlimit(RLIMIT_NOFILE, &limit) != 0)
        log_warn("setrlimit(RLIMIT_NOFILE, %llu): %s", (unsigned long long)target, strerror(errno));
    else if (target < clients)
        log_warn("open files limited to %llu (the hard limit), below max_connections %u x %u "
                 "workers; accepting pauses when it is reached",
                 (unsigned long long)target, config->max_connections, workers);
}

/*
 * A reload runs in this process, after the privilege drop, and must read
 * what root may read: certificates and keys renewed as root, mode 0600 (the
 * certbot case), which nginx's master reads because it stays root.  Only
 * CAP_DAC_READ_SEARCH is kept, and only by the thread that drops (the main
 * one: glibc's setuid() takes every other thread's capabilities), in its
 * permitted set; it is effective only while a reload reads its files
 * (privileged_reads()).  Worker threads a reload creates inherit the
 * permitted set: see docs/deployment.md.
 */
static bool read_capability_kept;

static int capability_sets(struct __user_cap_data_struct data[2], bool set)
{
    struct __user_cap_header_struct header = {.version = _LINUX_CAPABILITY_VERSION_3, .pid = 0};
    return (int)syscall(set ? SYS_capset : SYS_capget, &header, data);
}

/* After setuid() with PR_SET_KEEPCAPS: CAP_DAC_READ_SEARCH alone stays,
 * permitted but not effective. */
static void keep_read_capability(void)
{
    struct __user_cap_data_struct data[2] = {{0}};
    const unsigned bit = CAP_DAC_READ_SEARCH;
    data[bit / 32].permitted = 1u << (bit % 32);
    if (capability_sets(data, true) != 0) {
        log_warn("capset(CAP_DAC_READ_SEARCH): %s; a reload reads files as uid %u", strerror(errno),
                 (unsigned)getuid());
        return;
    }
    read_capability_kept = true;
}

void privileged_reads(bool on)
{
    if (!read_capability_kept)
        return;
    struct __user_cap_data_struct data[2] = {{0}};
    const unsigned bit = CAP_DAC_READ_SEARCH;
    data[bit / 32].permitted = 1u << (bit % 32);
    data[bit / 32].effective = on ? 1u << (bit % 32) : 0;
    if (capability_sets(data, true) != 0)
        log_warn("capset(CAP_DAC_READ_SEARCH %s): %s", on ? "on" : "off", strerror(errno));
}

int drop_privileges(const struct conf_config *config)
{
    if (config->user == NULL && config->group == NULL)
        return 0;
    gid_t gid = getgid();
    uid_t uid = getuid();
    if (config->user != NULL) {
        struct passwd *pw = getpwnam(config->user);
        if (pw == NULL) {
            log_error("user \"%s\": no such user", config->user);
            return -1;
        }
        uid = pw->pw_uid;
        gid = pw->pw_gid;
    }
    if (config->group != NULL) {
        struct group *gr = getgrnam(config->group);
        if (gr == NULL) {
            log_error("group \"%s\": no such group", config->group);
            return -1;
        }
        gid = gr->gr_gid;
    }
    /* Group first: once the user changes, the group can no longer be. */
    if (setgroups(0, NULL) != 0 && errno != EPERM) {
        log_error("setgroups: %s", strerror(errno));
        return -1;
    }
    bool keep = geteuid() == 0 && uid != 0 && prctl(PR_SET_KEEPCAPS, 1L, 0L, 0L, 0L) == 0;
    if (setgid(gid) != 0 || setuid(uid) != 0) {
        log_error("dropping privileges to %s:%s: %s", config->user ? config->user : "-",
                  config->group ? config->group : "-", strerror(errno));
        return -1;
    }
    if (keep) {
        prctl(PR_SET_KEEPCAPS, 0L, 0L, 0L, 0L);
        keep_read_capability();
    }
    log_info("running as uid %u gid %u%s", (unsigned)uid, (unsigned)gid,
             read_capability_kept ? " (reloads keep reading root's files)" : "");
    return 0;
}

int write_pid_file(const char *path)
{
    FILE *f = fopen(path, "we");
    if (f == NULL) {
        log_error("pid_file %s: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "%d\n", (int)getpid());
    if (fclose(f) != 0) {
        log_error("pid_file %s: %s", path, strerror(errno));
        return -1;
    }
    return 0;
}

/* Removes the pid file at `path` if it still holds `pid`, so that a daemon
 * that failed to start never removes the file of the one running.  Returns
 * 0 (also when there is nothing to remove) or -errno. */
static int pid_file_remove(const char *path, pid_t pid)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd == -1)
        return errno == ENOENT ? 0 : -errno;
    char text[32];
    ssize_t n = read(fd, text, sizeof(text) - 1);
    int err = errno;
    close(fd);
    if (n == -1)
        return -err;
    text[n] = '\0';
    if (strtol(text, NULL, 10) != (long)pid)
        return 0;
    return unlink(path) == 0 || errno == ENOENT ? 0 : -errno;
}

/*
 * Once privileges are dropped the daemon can no longer remove its pid file:
 * the directory it is in (/run) is writable by root only, and a directory
 * descriptor kept open would not help, as unlinkat() checks the caller's
 * rights at the time of the call.  nginx removes the file from its master
 * process, which keeps its privileges; corral forks, before any thread
 * exists, a process for that alone.  It holds nothing of the daemon's but
 * the read end of a pipe, waits for the daemon to end (the write end
 * closes, after a crash too), removes the file if it still holds the
 * daemon's pid, and exits with 0 or the errno of the failure.
 */
static pid_t keeper_pid = -1;
static int keeper_fd = -1; /* the write end */

int pid_file_keeper_start(const char *path)
{
    int fds[2];
    if (pipe2(fds, O_CLOEXEC) == -1) {
        int err = -errno;
        log_error("pid_file %s: pipe2: %s", path, strerror(errno));
        return err;
    }
    pid_t daemon_pid = getpid();
    pid_t pid = fork();
    if (pid == -1) {
        int err = -errno;
        log_error("pid_file %s: fork: %s", path, strerror(errno));
        close(fds[0]);
        close(fds[1]);
        return err;
    }
    if (pid == 0) {
        /* The daemon's signals (^C from a terminal, systemd's SIGTERM to the
         * whole unit) must not end the keeper before the daemon ends. */
        sigset_t all;
        sigfillset(&all);
        sigprocmask(SIG_BLOCK, &all, NULL);
        prctl(PR_SET_NAME, "corral-pidfile");
        close(fds[1]);
        if (fds[0] != 3)
            dup2(fds[0], 3);
        /* No socket or file of the daemon's stays open in here. */
        if (close_range(4, ~0U, 0) != 0)
            for (int fd = 4; fd < 1024; fd++)
                close(fd);
        char byte;
        while (read(3, &byte, 1) == -1 && errno == EINTR)
            ;
        _exit(-pid_file_remove(path, daemon_pid) & 0xff);
    }
    close(fds[0]);
    keeper_pid = pid;
    keeper_fd = fds[1];
    return 0;
}

/* Removes the pid file at exit: through the keeper if there is one. */
void pid_file_release(const char *path)
{
    int err;
    if (keeper_pid > 0) {
        close(keeper_fd);
        int status;
        pid_t rc;
        while ((rc = waitpid(keeper_pid, &status, 0)) == -1 && errno == EINTR)
            ;
        keeper_pid = -1;
        if (rc != -1 && WIFSIGNALED(status)) {
            log_error("pid_file %s: the process removing it was killed (%s)", path,
                      strsignal(WTERMSIG(status)));
            return;
        }
        err = rc == -1 ? -errno : -WEXITSTATUS(status);
    } else {
        err = pid_file_remove(path, getpid());
    }
    if (err != 0)
        log_error("pid_file %s: removing it: %s", path, strerror(-err));
}

/* ----------------------------------------------------------- binary upgrade */

static char *binary_path;  /* the binary this process was started from */
static char **binary_argv; /* and its arguments */

void remember_binary(char **argv)
{
    binary_argv = argv;
    const char *name = argv[0];
    if (strchr(name, '/') != NULL) {
        /* Relative to the directory it was started from, which the daemon
         * may not stay in: made absolute now. */
        char cwd[PATH_MAX];
        if (name[0] == '/' || getcwd(cwd, sizeof(cwd)) == NULL)
            binary_path = strdup(name);
        else if (asprintf(&binary_path, "%s/%s", cwd, name) == -1)
            binary_path = NULL;
        return;
    }
    /* Found on PATH, as the shell found it. */
    const char *path = getenv("PATH");
    for (const char *dir = path; dir != NULL && *dir != '\0';) {
        size_t len = strcspn(dir, ":");
        char *candidate;
        if (asprintf(&candidate, "%.*s/%s", (int)len, dir, name) != -1) {
            if (access(candidate, X_OK) == 0) {
                binary_path = candidate;
                return;
            }
            free(candidate);
        }
        dir += len + (dir[len] == ':');
    }
}

const char *binary_started_from(void)
{
    return binary_path;
}

/* Whether environment entry `entry` sets one of the variables the new
 * process gets from upgrade_spawn(). */
static bool spawn_variable(const char *entry)
{
    static const char *const names[] = {
        "LISTEN_PID=", "LISTEN_FDS=", "LISTEN_FDNAMES=", "CORRAL_UPGRADE_FD="};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
        if (strncmp(entry, names[i], strlen(names[i])) == 0)
            return true;
    return false;
}

int upgrade_spawn(const int *fds, unsigned count, int report_fd, pid_t *out)
{
    if (binary_path == NULL)
        return -ENOENT;
    /* Everything the child needs is made here: other threads run, so the
     * child may call only async-signal-safe functions before exec (no
     * malloc, no setenv).  LISTEN_PID is the child's own pid, written into
     * its slot by the child. */
    size_t env_count = 0;
    while (environ[env_count] != NULL)
        env_count++;
    char **env = calloc(env_count + 4, sizeof(*env));
    int *moved = calloc(count + 1, sizeof(*moved));
    char listen_pid[32] = "LISTEN_PID=", listen_fds[32], report_var[48];
    if (env == NULL || moved == NULL) {
        free(env);
        free(moved);
        return -ENOMEM;
    }
    size_t n = 0;
    for (size_t i = 0; i < env_count; i++)
        if (!spawn_variable(environ[i]))
            env[n++] = environ[i];
    snprintf(listen_fds, sizeof(listen_fds), "LISTEN_FDS=%u", count);
    /* The report socket goes right after the listening sockets. */
    snprintf(report_var, sizeof(report_var), "CORRAL_UPGRADE_FD=%u", 3 + count);
    env[n++] = listen_pid;
    env[n++] = listen_fds;
    env[n++] = report_var;
    env[n] = NULL;

    pid_t pid = fork();
    if (pid != 0) {
        int err = pid == -1 ? -errno : 0;
        free(env);
        free(moved);
        *out = pid;
        return err;
    }
    /* The child: the sockets at 3, 4, ... as systemd passes them, then the
     * report socket.  All are moved above that range first, so that none
     * is overwritten before its turn; dup2() clears close-on-exec. */
    int high = 3 + (int)count + 1;
    for (unsigned i = 0; i <= count; i++)
        if ((moved[i] = fcntl(i < count ? fds[i] : report_fd, F_DUPFD_CLOEXEC, high)) == -1)
            _exit(127);
    for (unsigned i = 0; i <= count; i++)
        if (dup2(moved[i], 3 + (int)i) == -1)
            _exit(127);
    /* getpid() in decimal, by hand: snprintf is not async-signal-safe. */
    char digits[16];
    size_t len = 0;
    for (unsigned long v = (unsigned long)getpid(); len == 0 || v > 0; v /= 10)
        digits[len++] = (char)('0' + v % 10);
    size_t at = strlen("LISTEN_PID=");
    while (len > 0)
        listen_pid[at++] = digits[--len];
    listen_pid[at] = '\0';
    /* The main thread blocks the signals it reads from a signalfd; the
     * mask would survive the exec. */
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);
    execve(binary_path, binary_argv, env);
    _exit(127);
}

int upgrade_collect_report(void)
{
    const char *text = getenv("CORRAL_UPGRADE_FD");
    if (text == NULL)
        return -1;
    int fd = atoi(text);
    unsetenv("CORRAL_UPGRADE_FD");
    return fd >= 3 && fcntl(fd, F_SETFD, FD_CLOEXEC) == 0 ? fd : -1;
}

void upgrade_report_ready(int fd)
{
    ssize_t n;
    while ((n = send(fd, "R", 1, MSG_NOSIGNAL)) == -1 && errno == EINTR)
        ;
    if (n != 1)
        log_warn("reporting the upgrade done: %s", strerror(errno));
}

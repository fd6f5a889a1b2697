/* shim: the per-container supervisor. One tiny static process per running container.
 *
 * usage: shim EXIT_FILE LOG_PATH PID OUT_FD ERR_FD [STDIN_FD CTL_FD TTY [ATTACH_SOCK]]
 *   PID      the container's init process, a child of this process (the runtime forks it,
 *            then this process execs the shim, so the child stays ours to wait for)
 *   OUT_FD   read end of the container's stdout pipe; ERR_FD the stderr pipe
 *   LOG_PATH where the container's output goes, in the CRI log format
 *            ("<RFC3339Nano> <stdout|stderr> <F|P> <content>\n"); "-" discards it
 * When the container exits, its status is written to EXIT_FILE (temp file + rename) as
 * "code=N signal=S finished=NS\n", so it is known even when the runtime daemon was down.
 * SIGUSR1 reopens LOG_PATH (after log rotation). SIGTERM/SIGINT/SIGHUP are ignored: the
 * runtime stops the container, not the shim.
 *
 * Containers made with stdin (and/or a terminal) pass three more arguments:
 *   STDIN_FD the container's stdin FIFO, opened read-write and held here, so the container sees
 *            no EOF while nobody is attached; the runtime daemon opens the FIFO's path to write
 *            into it (also after a restart). With TTY it is pumped into the terminal; -1: none.
 *   CTL_FD   a control FIFO (read-write), one command a line: "close-stdin" drops our hold on
 *            the stdin FIFO (EOF for the container once the attached writer closes too: stdin_once)
 *            and "resize W H" sets the terminal's window size; -1: none.
 *   TTY      "1" when OUT_FD is the master of the container's terminal (ERR_FD is then -1): its
 *            output is logged as stdout without waiting for a newline (prompts show at once).
 *   ATTACH_SOCK a unix SOCK_SEQPACKET socket made here for attached clients (CRI Attach): every read
 *            from the container's stdout or stderr goes, as it is read, to each connected client as one
 *            message "<1|2><bytes>" (1 stdout, 2 stderr), while the log keeps its line records. So an
 *            attached client sees output as it is written, partial lines included, as containerd's
 *            attach does. A client that cannot take a message at once (its socket buffer is full) is
 *            dropped rather than stalling the container. "-" or absent: no socket.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_LINE 16384
#define MAX_CLIENTS 32
#define CLIENT_SNDBUF (4 << 20)

struct stream {
    int fd;
    const char *name;
    int tty;
    char buf[MAX_LINE];
    size_t len;
};

static const char *log_path;
static int log_fd = -1;

static void open_log(void) {
    if (log_fd >= 0) close(log_fd);
    log_fd = -1;
    if (strcmp(log_path, "-") == 0) return;
    log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
}

static void write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return;
        }
        p += w;
        n -= (size_t)w;
    }
}

static void emit(struct stream *s, const char *data, size_t n, char tag) {
    if (log_fd < 0) return;
    char head[96];
    struct timespec ts;
    struct tm tm;
    clock_gettime(CLOCK_REALTIME, &ts);
    gmtime_r(&ts.tv_sec, &tm);
    int h = snprintf(head, sizeof(head), "%04d-%02d-%02dT%02d:%02d:%02d.%09ldZ %s %c ",
                     tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min, tm.tm_sec,
                     ts.tv_nsec, s->name, tag);
    /* One write per record keeps lines whole when stdout and stderr interleave. */
    char out[sizeof(head) + MAX_LINE + 1];
    memcpy(out, head, (size_t)h);
    memcpy(out + h, data, n);
    out[h + n] = '\n';
    write_all(log_fd, out, (size_t)h + n + 1);
}

/* Emit every complete line in the buffer; a full buffer without a newline goes out as a partial. */
static void flush_lines(struct stream *s, int at_eof) {
    size_t start = 0;
    for (size_t i = 0; i < s->len; i++) {
        if (s->buf[i] == '\n') {
            emit(s, s->buf + start, i - start, 'F');
            start = i + 1;
        }
    }
    if (start > 0) {
        memmove(s->buf, s->buf + start, s->len - start);
        s->len -= start;
    }
    if (s->len == MAX_LINE || (at_eof && s->len > 0)) {
        emit(s, s->buf, s->len, at_eof ? 'F' : 'P');
        s->len = 0;
    }
}

/* -- attached clients ------------------------------------------------------------------------- */

static const char *attach_path;
static int listen_fd = -1;
static int clients[MAX_CLIENTS];
static int nclients;

/* The socket path may be longer than sun_path allows: bind through the directory's /proc/self/fd link. */
static void listen_attach(void) {
    if (!attach_path || !attach_path[0] || strcmp(attach_path, "-") == 0) return;
    const char *slash = strrchr(attach_path, '/');
    char dir[4096];
    size_t dlen = slash ? (size_t)(slash - attach_path) : 0;
    if (dlen >= sizeof(dir)) return;
    memcpy(dir, attach_path, dlen);
    dir[dlen] = 0;
    int dfd = open(dlen ? dir : (slash ? "/" : "."), O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (dfd < 0) return;
    struct sockaddr_un a = {.sun_family = AF_UNIX};
    int n = snprintf(a.sun_path, sizeof(a.sun_path), "/proc/self/fd/%d/%s", dfd, slash ? slash + 1 : attach_path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (n > 0 && (size_t)n < sizeof(a.sun_path) && fd >= 0) {
        unlink(a.sun_path);
        mode_t old = umask(077);  /* only root reaches a container's output */
        if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 && listen(fd, MAX_CLIENTS) == 0) {
            listen_fd = fd;
            fd = -1;
        }
        umask(old);
    }
    if (fd >= 0) close(fd);
    close(dfd);
}

static void drop_client(int i) {
    close(clients[i]);
    clients[i] = clients[--nclients];
}

static void accept_clients(void) {
    for (;;) {
        int fd = accept4(listen_fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) return;
        if (nclients == MAX_CLIENTS) {
            close(fd);
            continue;
        }
        int size = CLIENT_SNDBUF;
        if (setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &size, sizeof(size)) < 0)
            setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &size, sizeof(size));
        clients[nclients++] = fd;
    }
}

/* What the container just wrote, to every attached client, whole or not at all. */
static void broadcast(const struct stream *s, const char *data, size_t n) {
    if (nclients == 0) return;
    char msg[1 + MAX_LINE];
    msg[0] = strcmp(s->name, "stdout") == 0 ? 1 : 2;
    memcpy(msg + 1, data, n);
    for (int i = nclients - 1; i >= 0; i--) {
        if (send(clients[i], msg, n + 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) drop_client(i);
    }
}

/* Returns 0 at EOF (or error), 1 otherwise. */
static int pump(struct stream *s) {
    ssize_t n = read(s->fd, s->buf + s->len, MAX_LINE - s->len);
    if (n < 0 && (errno == EINTR || errno == EAGAIN)) return 1;
    if (n <= 0) {
        flush_lines(s, 1);
        close(s->fd);
        s->fd = -1;
        return 0;
    }
    broadcast(s, s->buf + s->len, (size_t)n);
    s->len += (size_t)n;
    flush_lines(s, 0);
    if (s->tty && s->len > 0) {  /* a terminal's output is interactive: no waiting for the newline */
        emit(s, s->buf, s->len, 'P');
        s->len = 0;
    }
    return 1;
}

static int stdin_fd = -1, ctl_fd = -1, term_fd = -1;
static char ctl_buf[256];
static size_t ctl_len;

static void run_command(char *line) {
    unsigned w, h;
    if (strcmp(line, "close-stdin") == 0) {
        if (stdin_fd >= 0) close(stdin_fd);
        stdin_fd = -1;
    } else if (sscanf(line, "resize %u %u", &w, &h) == 2 && term_fd >= 0) {
        struct winsize ws = {.ws_row = (unsigned short)h, .ws_col = (unsigned short)w};
        ioctl(term_fd, TIOCSWINSZ, &ws);
    }
}

static void read_control(void) {
    ssize_t n = read(ctl_fd, ctl_buf + ctl_len, sizeof(ctl_buf) - 1 - ctl_len);
    if (n <= 0) return;
    ctl_len += (size_t)n;
    size_t start = 0;
    for (size_t i = 0; i < ctl_len; i++) {
        if (ctl_buf[i] == '\n') {
            ctl_buf[i] = 0;
            run_command(ctl_buf + start);
            start = i + 1;
        }
    }
    memmove(ctl_buf, ctl_buf + start, ctl_len - start);
    ctl_len -= start;
    if (ctl_len == sizeof(ctl_buf) - 1) ctl_len = 0;  /* no newline in a full buffer: junk */
}

/* The attached client's input into the terminal (the FIFO never ends: we hold a writer). */
static void pump_input(void) {
    char buf[4096];
    ssize_t n = read(stdin_fd, buf, sizeof(buf));
    if (n > 0) write_all(term_fd, buf, (size_t)n);
}

static void write_exit(const char *path, int status) {
    int code = 255, sig = 0;
    if (WIFEXITED(status)) code = WEXITSTATUS(status);
    else if (WIFSIGNALED(status)) { sig = WTERMSIG(status); code = 128 + sig; }
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    char tmp[4096];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) return;
    char line[128];
    int n = snprintf(line, sizeof(line), "code=%d signal=%d finished=%lld\n", code, sig,
                     (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    write_all(fd, line, (size_t)n);
    fsync(fd);
    close(fd);
    rename(tmp, path);
}

int main(int argc, char **argv) {
    if (argc != 6 && argc != 9 && argc != 10) {
        fprintf(stderr, "usage: shim EXIT_FILE LOG_PATH PID OUT_FD ERR_FD [STDIN_FD CTL_FD TTY [ATTACH_SOCK]]\n");
        return 2;
    }
    const char *exit_file = argv[1];
    log_path = argv[2];
    pid_t pid = (pid_t)atoi(argv[3]);
    static struct stream streams[2];
    streams[0].fd = atoi(argv[4]);
    streams[0].name = "stdout";
    streams[1].fd = atoi(argv[5]);
    streams[1].name = "stderr";
    if (argc == 10) attach_path = argv[9];
    if (argc >= 9) {
        stdin_fd = atoi(argv[6]);
        ctl_fd = atoi(argv[7]);
        if (strcmp(argv[8], "1") == 0) {
            term_fd = streams[0].fd;
            streams[0].tty = 1;
        }
    }

    signal(SIGTERM, SIG_IGN);
    signal(SIGINT, SIG_IGN);
    signal(SIGHUP, SIG_IGN);
    signal(SIGPIPE, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    sigaddset(&mask, SIGCHLD);
    sigaddset(&mask, SIGUSR1);
    sigprocmask(SIG_BLOCK, &mask, NULL);
    int sfd = signalfd(-1, &mask, SFD_CLOEXEC | SFD_NONBLOCK);
    open_log();
    listen_attach();

    int exited = 0, status = 0;
    /* A SIGCHLD may have arrived before the mask was set: check once up front. */
    if (waitpid(pid, &status, WNOHANG) == pid) exited = 1;
    int drain_ms = -1;
    for (;;) {
        struct pollfd fds[6 + MAX_CLIENTS];
        fds[0].fd = sfd; fds[0].events = POLLIN;
        fds[1].fd = streams[0].fd; fds[1].events = POLLIN;
        fds[2].fd = streams[1].fd; fds[2].events = POLLIN;
        fds[3].fd = exited ? -1 : ctl_fd; fds[3].events = POLLIN;
        fds[4].fd = (exited || term_fd < 0 || streams[0].fd < 0) ? -1 : stdin_fd; fds[4].events = POLLIN;
        fds[5].fd = listen_fd; fds[5].events = POLLIN;
        for (int i = 0; i < nclients; i++) {  /* clients never write: readable means they hung up */
            fds[6 + i].fd = clients[i];
            fds[6 + i].events = POLLIN;
        }
        int nfds = 6 + nclients;
        if (exited && streams[0].fd < 0 && streams[1].fd < 0) break;
        if (exited && drain_ms < 0) drain_ms = 500;  /* leftover writers: give output a moment */
        int rc = poll(fds, (nfds_t)nfds, exited ? drain_ms : -1);
        if (rc < 0 && errno == EINTR) continue;
        if (rc == 0) break;  /* drain time is up */
        if (fds[0].revents & POLLIN) {
            struct signalfd_siginfo si;
            while (read(sfd, &si, sizeof(si)) == sizeof(si)) {
                if (si.ssi_signo == SIGUSR1) open_log();
            }
            if (!exited && waitpid(pid, &status, WNOHANG) == pid) exited = 1;
            while (waitpid(-1, NULL, WNOHANG) > 0) {}
        }
        for (int i = nfds - 7; i >= 0; i--) {
            if (fds[6 + i].revents) drop_client(i);
        }
        /* New clients before output: one that connected before it wrote to stdin sees the reply. */
        if (fds[5].revents & POLLIN) accept_clients();
        for (int i = 0; i < 2; i++) {
            if (streams[i].fd >= 0 && (fds[i + 1].revents & (POLLIN | POLLHUP | POLLERR))) pump(&streams[i]);
        }
        if (fds[3].revents & POLLIN) read_control();
        if (stdin_fd >= 0 && fds[4].fd >= 0 && (fds[4].revents & POLLIN)) pump_input();
    }
    for (int i = 0; i < 2; i++) {
        if (streams[i].fd >= 0) flush_lines(&streams[i], 1);
    }
    if (listen_fd >= 0) unlink(attach_path);  /* clients see EOF as we exit; nobody new connects */
    write_exit(exit_file, status);
    return 0;
}

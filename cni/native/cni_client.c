/*
 * nodeagent-bridge's exec'd fast path: a ~1 ms thin client for the resident `nodeagent cni-daemon`.
 *
 * It forwards the invocation verbatim (the whole environment and the config on stdin) over the
 * daemon's unix socket and relays the answer: exit status and stdout. When no daemon listens
 * (or NODEAGENT_CNI_SOCKET=none, or for VERSION) it execs the Python plugin instead, which runs
 * in-process; so the plugin works identically with or without the daemon.
 *
 * Wire format, request:  "NACNI1 <plugin>\n" then "K=V\0" per variable, "\0", then stdin to EOF.
 *             response: "<exit status>\n" then the plugin's stdout to EOF.
 * Built by `python -m cni.install` with -DPLUGIN, -DPYTHON, -DROOT and -DDEFAULT_SOCKET.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

extern char **environ;

static int write_all(int fd, const char *p, size_t n) {
    while (n > 0) {
        ssize_t w = write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            return -1;
        }
        p += w;
        n -= (size_t)w;
    }
    return 0;
}

static void fallback(void) {
    const char *code = "import sys; sys.path.insert(0, '" ROOT "'); from cni.client import main; "
                       "sys.exit(main('" PLUGIN "', daemon=False))";
    execl(PYTHON, PYTHON, "-IS", "-c", code, (char *)NULL);
    perror("nodeagent cni client: exec " PYTHON);
    _exit(1);
}

static int try_again(const char *why) {
    printf("{\"cniVersion\":\"1.0.0\",\"code\":11,\"msg\":\"cni daemon connection failed\",\"details\":\"%s\"}\n", why);
    return 1;
}

int main(void) {
    const char *cmd = getenv("CNI_COMMAND");
    const char *path = getenv("NODEAGENT_CNI_SOCKET");
    if (!path || !*path) path = DEFAULT_SOCKET;
    if (!cmd || !strcmp(cmd, "VERSION") || !strcmp(path, "none")) fallback();

    struct sockaddr_un addr = {.sun_family = AF_UNIX};
    if (strlen(path) >= sizeof addr.sun_path) fallback();
    strcpy(addr.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0 || connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) {
        if (fd >= 0) close(fd);
        fallback();  /* nothing consumed yet: the fallback sees the same stdin */
    }

    static char buf[65536];
    int n = snprintf(buf, sizeof buf, "NACNI1 %s\n", PLUGIN);
    if (write_all(fd, buf, (size_t)n)) return try_again("send");
    for (char **e = environ; *e; e++)
        if (write_all(fd, *e, strlen(*e) + 1)) return try_again("send");
    if (write_all(fd, "", 1)) return try_again("send");
    for (;;) {
        ssize_t r = read(0, buf, sizeof buf);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        if (write_all(fd, buf, (size_t)r)) return try_again("send");
    }
    shutdown(fd, SHUT_WR);

    int status = -1;
    size_t have = 0;
    for (;;) {
        ssize_t r = read(fd, buf + have, sizeof buf - have);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) break;
        have += (size_t)r;
        if (status < 0) {
            char *nl = memchr(buf, '\n', have);
            if (!nl) {
                if (have == sizeof buf) return try_again("bad reply");
                continue;
            }
            status = atoi(buf);
            size_t rest = have - (size_t)(nl + 1 - buf);
            if (write_all(1, nl + 1, rest)) return 1;
        } else if (write_all(1, buf, have)) {
            return 1;
        }
        have = 0;
    }
    if (status < 0) return try_again("no reply");
    return status;
}

/* pause: the process that holds a pod sandbox's namespaces open.
 *
 * usage: pause [-n] [-i] [-u] [-p] [-l] [-H hostname] [-s name=value]...
 *   -n -i -u -p   unshare the net, ipc, uts, pid namespaces (with -p it forks so the pause
 *                 process is PID 1 of the new pid namespace and the parent exits)
 *   -l            bring the loopback interface up (in the new net namespace)
 *   -H name       set the hostname (in the new uts namespace)
 *   -s k=v        set a namespaced sysctl (e.g. net.ipv4.ip_forward=1) inside the new namespaces
 * Once set up it writes its (host) pid and a newline to stdout, closes stdout and sleeps,
 * reaping zombies, until SIGTERM or SIGINT. Static, tiny: it is the per-pod overhead.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

static void on_term(int sig) { (void)sig; _exit(0); }

static void on_child(int sig) {
    (void)sig;
    while (waitpid(-1, NULL, WNOHANG) > 0) {}
}

static int loopback_up(void) {
    int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    struct ifreq ifr;
    memset(&ifr, 0, sizeof(ifr));
    strncpy(ifr.ifr_name, "lo", IFNAMSIZ - 1);
    int rc = ioctl(fd, SIOCGIFFLAGS, &ifr);
    if (rc == 0) {
        ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
        rc = ioctl(fd, SIOCSIFFLAGS, &ifr);
    }
    close(fd);
    return rc;
}

static int set_sysctl(const char *kv) {
    const char *eq = strchr(kv, '=');
    if (!eq || eq == kv) { errno = EINVAL; return -1; }
    char path[512] = "/proc/sys/";
    size_t n = strlen(path);
    for (const char *p = kv; p < eq && n < sizeof(path) - 1; p++) path[n++] = (*p == '.') ? '/' : *p;
    path[n] = 0;
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) return -1;
    ssize_t len = (ssize_t)strlen(eq + 1);
    ssize_t w = write(fd, eq + 1, (size_t)len);
    close(fd);
    return w == len ? 0 : -1;
}

static void fail(const char *what) {
    fprintf(stderr, "pause: %s: %s\n", what, strerror(errno));
    exit(1);
}

int main(int argc, char **argv) {
    int flags = 0, lo = 0, opt;
    const char *hostname = NULL;
    const char *sysctls[64];
    int nsysctl = 0;
    while ((opt = getopt(argc, argv, "niuplH:s:")) != -1) {
        switch (opt) {
        case 'n': flags |= CLONE_NEWNET; break;
        case 'i': flags |= CLONE_NEWIPC; break;
        case 'u': flags |= CLONE_NEWUTS; break;
        case 'p': flags |= CLONE_NEWPID; break;
        case 'l': lo = 1; break;
        case 'H': hostname = optarg; break;
        case 's':
            if (nsysctl < 64) sysctls[nsysctl++] = optarg;
            break;
        default:
            fprintf(stderr, "usage: pause [-n] [-i] [-u] [-p] [-l] [-H hostname] [-s name=value]...\n");
            return 2;
        }
    }
    if (flags && unshare(flags) < 0) fail("unshare");
    if (hostname && sethostname(hostname, strlen(hostname)) < 0) fail("sethostname");
    if (lo && loopback_up() < 0) fail("loopback up");
    for (int i = 0; i < nsysctl; i++) {
        if (set_sysctl(sysctls[i]) < 0) {
            fprintf(stderr, "pause: sysctl %s: %s\n", sysctls[i], strerror(errno));
            exit(1);
        }
    }
    if (flags & CLONE_NEWPID) {
        pid_t child = fork();
        if (child < 0) fail("fork");
        if (child > 0) {
            printf("%d\n", (int)child);
            fflush(stdout);
            _exit(0);
        }
    } else {
        printf("%d\n", (int)getpid());
        fflush(stdout);
    }
    int devnull = open("/dev/null", O_RDWR);
    if (devnull >= 0) {
        dup2(devnull, 0);
        dup2(devnull, 1);
        if (devnull > 2) close(devnull);
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_term;
    sigaction(SIGTERM, &sa, NULL);
    sigaction(SIGINT, &sa, NULL);
    sa.sa_handler = on_child;
    sa.sa_flags = SA_NOCLDSTOP | SA_RESTART;
    sigaction(SIGCHLD, &sa, NULL);
    for (;;) pause();
}

/* launch: start a container, then become its shim.
 *
 * The runtime daemon posix_spawns `launch` (in a new session) with the container's launch spec on
 * fd 3 and a sync pipe on fd 4. This process (P1) reads the spec, creates or joins the pod's
 * pid namespace, and forks the container init (G). G joins the sandbox's namespaces, builds its mount
 * namespace (overlay rootfs bound on itself, /proc, /sys, /dev, the caller's mounts, masked and
 * read-only paths), pivots, joins its cgroup, drops privileges (AppArmor, seccomp, capabilities, ids) and execs
 * the user's command. P1 writes "pid G" on the sync pipe and execs the shim (shim.c) with G's pipes, so
 * the process that stays per container is the plain shim, no larger than before. The daemon reads
 * the sync pipe to EOF: G's and P1's copies close when they exec (close-on-exec); a failure is
 * written there as "err STEP: DETAIL" by whichever process failed.
 *
 * Why C: done from Python, this path cost two forks of the large daemon and the interpreter's
 * work in between (about 20 ms a container on this machine); here it is a fork of a tiny static
 * process and the syscalls themselves.
 *
 * The spec is a sequence of NUL-terminated strings in the order cri/runtime/process.py writes them
 * (encode_spec); lists are a count followed by their items.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <termios.h>
#include <unistd.h>

#define SPEC_FD 3
#define SYNC_FD 4
#define MAX_LIST 4096
#define ARENA_SIZE (64 << 20)  /* reserved, not committed: only the pages used count */

extern char **environ;

struct mnt { char *source, *target; int readonly, propagation, recursive_ro; };
struct dev { char *path; unsigned mode, major, minor; };

static struct spec {
    char **argv, **env;
    char *cwd;
    unsigned uid, gid;
    int ngroups;
    gid_t *groups;
    unsigned long long caps;
    int no_new_privs;
    int seccomp;  /* -1 none, else whether no_new_privs goes with it (libseccomp's NNP attribute) */
    unsigned char *bpf;
    size_t bpf_len;
    char *apparmor;  /* the AppArmor profile the execve moves to ("" = none) */
    char *rootfs;
    int nmounts;
    struct mnt *mounts;
    int nmasked, nreadonly;
    char **masked, **readonly;
    int readonly_rootfs, privileged;
    int njoin;
    char **join_kind, **join_path;
    char *pid_mode, *pid_ns_path, *shm_source;
    int ndevices;
    struct dev *devices;
    int nprocs;
    char **cgroup_procs;
    char *oom_score_adj;  /* "" = leave it */
    char *exit_file, *log_path, *stdin_path, *ctl_path, *attach_path;
    int tty;
    int last_cap;
    char *shim;
} *S;  /* in the arena, like the strings it points to */

static const char *step = "shim";

/* Report "err STEP: WHAT: strerror" on the sync pipe and exit (G and P1 both). */
static void die(const char *what) {
    int e = errno;
    dprintf(SYNC_FD, "err %s: %s: %s\n", step, what, strerror(e));
    _exit(127);
}

static void dief(const char *fmt, const char *arg) {
    char buf[PATH_MAX + 64];
    snprintf(buf, sizeof(buf), fmt, arg);
    die(buf);
}

/* -- the spec ------------------------------------------------------------------------------- */

/* The spec and everything parsed from it live in one anonymous mapping (no malloc). */
static char *arena, *spec_pos, *spec_end;
static size_t arena_used;

static void *alloc(size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n > ARENA_SIZE - arena_used) { errno = ENOMEM; die("launch spec too large"); }
    void *p = arena + arena_used;
    arena_used += n;
    return p;  /* zeroed: fresh anonymous memory */
}

static void read_spec(void) {
    arena = mmap(NULL, ARENA_SIZE, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (arena == MAP_FAILED) die("mmap");
    size_t len = 0, cap = ARENA_SIZE / 2;
    for (;;) {
        if (len == cap) { errno = E2BIG; die("reading the launch spec"); }
        ssize_t n = read(SPEC_FD, arena + len, cap - len);
        if (n < 0 && errno == EINTR) continue;
        if (n < 0) die("reading the launch spec");
        if (n == 0) break;
        len += (size_t)n;
    }
    close(SPEC_FD);
    spec_pos = arena;
    spec_end = arena + len;
    arena_used = len + 1;
    S = alloc(sizeof(*S));
}

static char *tok(void) {
    char *s = spec_pos;
    char *z = memchr(s, 0, (size_t)(spec_end - s));
    if (s >= spec_end || !z) { errno = EINVAL; die("truncated launch spec"); }
    spec_pos = z + 1;
    return s;
}

static long num(void) { return strtol(tok(), NULL, 10); }

static int count(void) {
    long n = num();
    if (n < 0 || n > MAX_LIST) { errno = EINVAL; die("bad list in launch spec"); }
    return (int)n;
}

static char **strings(int *n_out) {
    int n = count();
    char **v = alloc(((size_t)n + 1) * sizeof(char *));
    for (int i = 0; i < n; i++) v[i] = tok();
    if (n_out) *n_out = n;
    return v;
}

static void parse_spec(void) {
    if (strcmp(tok(), "nodeagent-launch-3") != 0) { errno = EINVAL; die("unknown launch spec version"); }
    S->argv = strings(NULL);
    S->env = strings(NULL);
    S->cwd = tok();
    S->uid = (unsigned)num();
    S->gid = (unsigned)num();
    S->ngroups = count();
    S->groups = alloc(((size_t)S->ngroups + 1) * sizeof(gid_t));
    for (int i = 0; i < S->ngroups; i++) S->groups[i] = (gid_t)num();
    S->caps = strtoull(tok(), NULL, 10);
    S->no_new_privs = (int)num();
    S->seccomp = (int)num();
    char *hex = tok();
    S->bpf_len = strlen(hex) / 2;
    S->bpf = alloc(S->bpf_len + 1);
    for (size_t i = 0; i < S->bpf_len; i++) {
        unsigned b;
        sscanf(hex + 2 * i, "%2x", &b);
        S->bpf[i] = (unsigned char)b;
    }
    S->apparmor = tok();
    S->rootfs = tok();
    S->nmounts = count();
    S->mounts = alloc(((size_t)S->nmounts + 1) * sizeof(struct mnt));
    for (int i = 0; i < S->nmounts; i++) {
        S->mounts[i].source = tok();
        S->mounts[i].target = tok();
        S->mounts[i].readonly = (int)num();
        S->mounts[i].propagation = (int)num();
        S->mounts[i].recursive_ro = (int)num();
    }
    S->masked = strings(&S->nmasked);
    S->readonly = strings(&S->nreadonly);
    S->readonly_rootfs = (int)num();
    S->privileged = (int)num();
    S->njoin = count();
    S->join_kind = alloc(((size_t)S->njoin + 1) * sizeof(char *));
    S->join_path = alloc(((size_t)S->njoin + 1) * sizeof(char *));
    for (int i = 0; i < S->njoin; i++) {
        S->join_kind[i] = tok();
        S->join_path[i] = tok();
    }
    S->pid_mode = tok();
    S->pid_ns_path = tok();
    S->shm_source = tok();
    S->ndevices = count();
    S->devices = alloc(((size_t)S->ndevices + 1) * sizeof(struct dev));
    for (int i = 0; i < S->ndevices; i++) {
        S->devices[i].path = tok();
        S->devices[i].mode = (unsigned)num();
        S->devices[i].major = (unsigned)num();
        S->devices[i].minor = (unsigned)num();
    }
    S->cgroup_procs = strings(&S->nprocs);
    S->oom_score_adj = tok();
    S->exit_file = tok();
    S->log_path = tok();
    S->stdin_path = tok();
    S->ctl_path = tok();
    S->tty = (int)num();
    S->last_cap = (int)num();
    S->shim = tok();
    S->attach_path = tok();
}

/* -- file system helpers --------------------------------------------------------------------- */

static void write_file(const char *path, const char *data) {
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0) dief("open %s", path);
    if (write(fd, data, strlen(data)) < 0) dief("write %s", path);
    close(fd);
}

/* mkdir -p (mode 0777 less the umask, as os.makedirs); an existing directory is fine. */
static int mkdirs(const char *path) {
    char buf[PATH_MAX];
    snprintf(buf, sizeof(buf), "%s", path);
    for (char *p = buf + 1;; p++) {
        if (*p == '/' || *p == 0) {
            char c = *p;
            *p = 0;
            if (mkdir(buf, 0777) < 0 && errno != EEXIST) return -1;
            *p = c;
            if (!c) break;
        }
    }
    return 0;
}

static int is_dir(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 && S_ISDIR(st.st_mode);
}

static int exists(const char *path) {
    struct stat st;
    return stat(path, &st) == 0;
}

/* root + path with every symlink resolved inside root, so a mount target cannot escape it. */
static void secure_join(const char *root, const char *path, char *out) {
    char rest[2 * PATH_MAX], cur[PATH_MAX] = "", tmp[2 * PATH_MAX];
    snprintf(rest, sizeof(rest), "%s", path);
    char *p = rest;
    int hops = 0;
    for (;;) {
        while (*p == '/') p++;
        if (!*p) break;
        char *slash = strchr(p, '/');
        size_t n = slash ? (size_t)(slash - p) : strlen(p);
        char comp[NAME_MAX + 1];
        if (n > NAME_MAX) { errno = ENAMETOOLONG; dief("resolve %s", path); }
        memcpy(comp, p, n);
        comp[n] = 0;
        p += n;
        if (strcmp(comp, ".") == 0) continue;
        if (strcmp(comp, "..") == 0) {
            char *s = strrchr(cur, '/');
            if (s) *s = 0;
            continue;
        }
        char cand[PATH_MAX], full[PATH_MAX + PATH_MAX];
        snprintf(cand, sizeof(cand), "%s/%s", cur, comp);
        snprintf(full, sizeof(full), "%s%s", root, cand);
        struct stat st;
        if (lstat(full, &st) < 0) {
            if (errno != ENOENT) dief("lstat %s", full);
            snprintf(cur, sizeof(cur), "%s", cand);
            continue;
        }
        if (S_ISLNK(st.st_mode)) {
            if (++hops > 40) { errno = ELOOP; dief("resolve %s", full); }
            char target[PATH_MAX];
            ssize_t len = readlink(full, target, sizeof(target) - 1);
            if (len < 0) dief("readlink %s", full);
            target[len] = 0;
            if (target[0] == '/') cur[0] = 0;
            snprintf(tmp, sizeof(tmp), "%s/%s", target, p);
            memcpy(rest, tmp, sizeof(rest));
            p = rest;
            continue;
        }
        snprintf(cur, sizeof(cur), "%s", cand);
    }
    snprintf(out, PATH_MAX, "%s%s", root, cur);
}

static void do_mount(const char *src, const char *target, const char *type, unsigned long flags, const char *data) {
    if (mount(src, target, type, flags, data) < 0) dief("mount %s", target);
}

/* The mount point holding `path` (the longest mount point that is a prefix of it). */
static void mount_point_of(const char *path, char *out) {
    char real[PATH_MAX];
    if (!realpath(path, real)) dief("realpath %s", path);
    snprintf(out, PATH_MAX, "/");
    FILE *f = fopen("/proc/self/mountinfo", "re");
    if (!f) die("open /proc/self/mountinfo");
    char line[4 * PATH_MAX];
    while (fgets(line, sizeof(line), f)) {
        char *field = line;
        for (int i = 0; i < 4 && field; i++) {
            field = strchr(field, ' ');
            if (field) field++;
        }
        if (!field) continue;
        char *end = strchr(field, ' ');
        if (end) *end = 0;
        char mp[PATH_MAX];
        size_t j = 0;
        for (char *s = field; *s && j < sizeof(mp) - 1; s++) {  /* only "\040" is unescaped, as before */
            if (strncmp(s, "\\040", 4) == 0) { mp[j++] = ' '; s += 3; } else mp[j++] = *s;
        }
        mp[j] = 0;
        size_t ml = strlen(mp);
        while (ml > 1 && mp[ml - 1] == '/') ml--;
        int under = strcmp(real, mp) == 0 || (strncmp(real, mp, ml) == 0 && (ml == 1 || real[ml] == '/'));
        if (ml == 1) under = 1;
        if (under && strlen(mp) > strlen(out)) snprintf(out, PATH_MAX, "%s", mp);
    }
    fclose(f);
}

/* -- the container init (G) ----------------------------------------------------------------- */

static const struct { const char *name; unsigned major, minor; } DEVICES[] = {
    {"null", 1, 3}, {"zero", 1, 5}, {"full", 1, 7}, {"random", 1, 8}, {"urandom", 1, 9}, {"tty", 5, 0},
};
static const char *DEV_LINKS[][2] = {
    {"fd", "/proc/self/fd"}, {"stdin", "/proc/self/fd/0"}, {"stdout", "/proc/self/fd/1"},
    {"stderr", "/proc/self/fd/2"}, {"ptmx", "pts/ptmx"}, {"core", "/proc/kcore"},
};

static void build_rootfs(void) {
    const char *root = S->rootfs;
    char p[PATH_MAX], dev[PATH_MAX], node[PATH_MAX + 64];
    unsigned long nsx = MS_NOSUID | MS_NOEXEC | MS_NODEV;
    do_mount(root, root, NULL, MS_BIND | MS_REC, NULL);
    secure_join(root, "/proc", p);
    if (mkdirs(p) < 0) dief("mkdir %s", p);
    do_mount("proc", p, "proc", nsx, NULL);
    secure_join(root, "/sys", p);
    if (mkdirs(p) < 0) dief("mkdir %s", p);
    do_mount("sysfs", p, "sysfs", nsx | (S->privileged ? 0 : MS_RDONLY), NULL);
    secure_join(root, "/dev", dev);
    if (mkdirs(dev) < 0) dief("mkdir %s", dev);
    do_mount("tmpfs", dev, "tmpfs", MS_NOSUID, "mode=755,size=65536k");
    for (size_t i = 0; i < sizeof(DEVICES) / sizeof(DEVICES[0]); i++) {
        snprintf(node, sizeof(node), "%s/%s", dev, DEVICES[i].name);
        if (mknod(node, 0666 | S_IFCHR, makedev(DEVICES[i].major, DEVICES[i].minor)) < 0) dief("mknod %s", node);
        if (chmod(node, 0666) < 0) dief("chmod %s", node);
    }
    for (size_t i = 0; i < sizeof(DEV_LINKS) / sizeof(DEV_LINKS[0]); i++) {
        snprintf(node, sizeof(node), "%s/%s", dev, DEV_LINKS[i][0]);
        if (symlink(DEV_LINKS[i][1], node) < 0) dief("symlink %s", node);
    }
    for (int i = 0; i < S->ndevices; i++) {
        struct dev *d = &S->devices[i];
        secure_join(root, d->path, p);
        char dir[PATH_MAX];
        snprintf(dir, sizeof(dir), "%s", p);
        char *slash = strrchr(dir, '/');
        if (slash && slash != dir) {
            *slash = 0;
            if (mkdirs(dir) < 0) dief("mkdir %s", dir);
        }
        if (unlink(p) < 0 && errno != ENOENT) dief("unlink %s", p);
        if (mknod(p, d->mode, makedev(d->major, d->minor)) < 0) dief("mknod %s", p);
        if (chmod(p, d->mode & 07777) < 0) dief("chmod %s", p);
    }
    snprintf(node, sizeof(node), "%s/pts", dev);
    if (mkdir(node, 0777) < 0) dief("mkdir %s", node);
    do_mount("devpts", node, "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5");
    snprintf(node, sizeof(node), "%s/shm", dev);
    if (mkdir(node, 0777) < 0) dief("mkdir %s", node);
    if (S->shm_source[0]) do_mount(S->shm_source, node, NULL, MS_BIND | MS_REC, NULL);
    else do_mount("shm", node, "tmpfs", nsx, "mode=1777,size=65536k");
    snprintf(node, sizeof(node), "%s/mqueue", dev);
    if (mkdir(node, 0777) < 0) dief("mkdir %s", node);
    mount("mqueue", node, "mqueue", nsx, NULL);  /* best effort, as before */
    for (int i = 0; i < S->nmounts; i++) {
        struct mnt *m = &S->mounts[i];
        secure_join(root, m->target, p);
        if (is_dir(m->source)) {
            if (mkdirs(p) < 0) dief("mkdir %s", p);
        } else {
            char dir[PATH_MAX];
            snprintf(dir, sizeof(dir), "%s", p);
            char *slash = strrchr(dir, '/');
            if (slash && slash != dir) {
                *slash = 0;
                if (mkdirs(dir) < 0) dief("mkdir %s", dir);
            }
            if (!exists(p)) {
                int fd = open(p, O_CREAT | O_WRONLY | O_CLOEXEC, 0644);
                if (fd < 0) dief("create %s", p);
                close(fd);
            }
        }
        do_mount(m->source, p, NULL, MS_BIND | MS_REC, NULL);
        if (m->readonly) do_mount(NULL, p, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL);
        do_mount(NULL, p, NULL, MS_REC | (unsigned long)m->propagation, NULL);
        if (m->recursive_ro) {
            struct { uint64_t set, clr, propagation, userns_fd; } attr = {1 /* MOUNT_ATTR_RDONLY */, 0, 0, 0};
            if (syscall(442 /* mount_setattr */, -100, p, 0x8000 /* AT_RECURSIVE */, &attr, sizeof(attr)) < 0)
                dief("mount_setattr %s", p);
        }
    }
}

static void mask_paths(void) {
    for (int i = 0; i < S->nmasked; i++) {
        const char *path = S->masked[i];
        int rc = is_dir(path) ? mount("tmpfs", path, "tmpfs", MS_RDONLY, NULL) : mount("/dev/null", path, NULL, MS_BIND, NULL);
        if (rc < 0 && errno != ENOENT && exists(path)) dief("mount %s", path);
    }
    for (int i = 0; i < S->nreadonly; i++) {
        const char *path = S->readonly[i];
        if (!exists(path)) continue;
        do_mount(path, path, NULL, MS_BIND | MS_REC, NULL);
        do_mount(NULL, path, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC, NULL);
    }
}

/* A terminal from the container's devpts (after the pivot): the master goes to the shim over
 * `sock`, we keep the slave as our controlling terminal. */
static int container_terminal(int sock) {
    int master = open("/dev/pts/ptmx", O_RDWR | O_NOCTTY | O_CLOEXEC);
    if (master < 0) die("open /dev/pts/ptmx");
    int unlock = 0;
    if (ioctl(master, TIOCSPTLCK, &unlock) < 0) die("unlock the pty");
    int slave = ioctl(master, TIOCGPTPEER, O_RDWR | O_NOCTTY);
    if (slave < 0) die("open the pty peer");
    if (fchown(slave, S->uid, (gid_t)-1) < 0) die("chown the pty");
    char data = 'm';
    struct iovec iov = {.iov_base = &data, .iov_len = 1};
    union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
    struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(c), &master, sizeof(int));
    if (sendmsg(sock, &msg, 0) < 0) die("send the pty master");
    close(master);
    setsid();
    if (ioctl(slave, TIOCSCTTY, 0) < 0) die("set the controlling terminal");
    return slave;
}

/* Ask AppArmor to move us to the container's profile at the execve, as runc does: written while we
 * are still root (our /proc files stay ours to write) and before no_new_privs (which would forbid
 * the transition). A failure stops the container rather than let it run unconfined. */
static void apply_apparmor(void) {
    if (!S->apparmor[0]) return;
    step = "apparmor";
    char data[4096];
    int n = snprintf(data, sizeof(data), "exec %s", S->apparmor);
    if (n < 0 || (size_t)n >= sizeof(data)) { errno = ENAMETOOLONG; die("apparmor profile name"); }
    const char *path = "/proc/thread-self/attr/apparmor/exec";
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 && errno == ENOENT) {  /* kernels before 5.8: the shared LSM attribute */
        path = "/proc/self/attr/exec";
        fd = open(path, O_WRONLY | O_CLOEXEC);
    }
    if (fd < 0) dief("open %s", path);
    if (write(fd, data, (size_t)n) != n) dief("write %s", path);
    close(fd);
    step = "credentials";
}

static void drop_privileges(void) {
    apply_apparmor();
    if (S->seccomp >= 0) {
        if (S->seccomp == 1 && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
        struct sock_fprog prog = {.len = (unsigned short)(S->bpf_len / sizeof(struct sock_filter)),
                                  .filter = (struct sock_filter *)S->bpf};
        if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0) die("seccomp_load");
    }
    for (int cap = 0; cap <= S->last_cap; cap++) {
        if (!(S->caps & (1ULL << cap)) && prctl(PR_CAPBSET_DROP, cap, 0, 0, 0) < 0) die("prctl PR_CAPBSET_DROP");
    }
    if (syscall(SYS_setgroups, S->ngroups, S->groups) < 0) die("setgroups");
    if (syscall(SYS_setresgid, S->gid, S->gid, S->gid) < 0) die("setresgid");
    if (syscall(SYS_setresuid, S->uid, S->uid, S->uid) < 0) die("setresuid");  /* non-root: every capability goes */
    if (S->uid == 0) {
        struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
        struct __user_cap_data_struct data[2];
        memset(data, 0, sizeof(data));
        for (int i = 0; i < 2; i++) {
            data[i].effective = data[i].permitted = (uint32_t)(S->caps >> (32 * i));
        }
        if (syscall(SYS_capset, &hdr, data) < 0) die("capset");
    }
    if (S->no_new_privs && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0) die("no_new_privs");
}

static int ns_flag(const char *kind) {
    if (strcmp(kind, "net") == 0) return CLONE_NEWNET;
    if (strcmp(kind, "ipc") == 0) return CLONE_NEWIPC;
    return CLONE_NEWUTS;
}

/* stdio: the stdin FIFO's read end or -1, the stdout and stderr pipes, the pty socket or -1. */
static void container_init(int in_r, int out_w, int err_w, int pty_sock) {
    /* The cgroup is joined last, just before the credentials change: the attach may wait for an
     * RCU grace period (the daemon started one as StartContainer began, see warm_attach in
     * cri/runtime/cgroups/base.py), and so does the old root's unmount below; joining late lets the
     * two waits overlap. Its files are opened now, while the host's /sys/fs/cgroup is reachable. */
    step = "cgroup";
    int procs[64];
    if (S->nprocs > 64) { errno = E2BIG; die("too many cgroup hierarchies"); }
    for (int i = 0; i < S->nprocs; i++) {
        procs[i] = open(S->cgroup_procs[i], O_WRONLY | O_CLOEXEC);
        if (procs[i] < 0) dief("open %s", S->cgroup_procs[i]);
    }
    step = "oom_score_adj";
    if (S->oom_score_adj[0]) write_file("/proc/self/oom_score_adj", S->oom_score_adj);
    step = "namespaces";
    int fds[8];
    for (int i = 0; i < S->njoin && i < 8; i++) {
        fds[i] = open(S->join_path[i], O_RDONLY | O_CLOEXEC);
        if (fds[i] < 0) dief("open %s", S->join_path[i]);
    }
    for (int i = 0; i < S->njoin && i < 8; i++) {
        if (setns(fds[i], ns_flag(S->join_kind[i])) < 0) dief("setns %s", S->join_path[i]);
        close(fds[i]);
    }
    if (unshare(CLONE_NEWNS) < 0) die("unshare");
    int bidirectional = 0;
    for (int i = 0; i < S->nmounts; i++) bidirectional |= S->mounts[i].propagation == MS_SHARED;
    if (bidirectional) {
        /* runc's rootfsPropagation=rshared: the host's mounts stay peers (a Bidirectional bind
         * joins its source's peer group); only the rootfs' own mount is cut off from the host */
        char mp[PATH_MAX];
        mount_point_of(S->rootfs, mp);
        do_mount(NULL, mp, NULL, MS_PRIVATE, NULL);
    } else {
        do_mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
    }
    step = "rootfs";
    build_rootfs();
    step = "pivot_root";
    if (chdir(S->rootfs) < 0) dief("chdir %s", S->rootfs);
    int old_root = -1;
    if (bidirectional && (old_root = open("/", O_DIRECTORY | O_RDONLY | O_CLOEXEC)) < 0) die("open /");
    if (syscall(SYS_pivot_root, ".", ".") < 0) die("pivot_root");
    if (bidirectional) {  /* as runc: from the old root, make it rslave so our unmount stays here */
        if (fchdir(old_root) < 0) die("fchdir");
        close(old_root);
        do_mount(NULL, ".", NULL, MS_REC | MS_SLAVE, NULL);
    }
    if (umount2(".", MNT_DETACH) < 0) die("umount the old root");
    if (chdir("/") < 0) die("chdir /");
    step = "masked paths";
    if (!S->privileged) mask_paths();
    if (S->readonly_rootfs) do_mount(NULL, "/", NULL, MS_BIND | MS_REMOUNT | MS_RDONLY | MS_REC, NULL);
    int term = -1;
    if (S->tty) {
        step = "terminal";
        term = container_terminal(pty_sock);
    }
    step = "cgroup";
    for (int i = 0; i < S->nprocs; i++) {
        if (write(procs[i], "0", 1) < 0) dief("write %s", S->cgroup_procs[i]);
        close(procs[i]);
    }
    step = "credentials";
    drop_privileges();
    step = "working directory";
    if (S->cwd[0]) {
        if (mkdirs(S->cwd) < 0 && errno != EACCES && errno != EPERM) dief("mkdir %s", S->cwd);
        if (chdir(S->cwd) < 0) dief("chdir %s", S->cwd);
    }
    step = "stdio";
    if (S->tty) {
        for (int t = 0; t < 3; t++) dup2(term, t);
    } else {
        int in = in_r >= 0 ? in_r : open("/dev/null", O_RDONLY);
        if (in < 0 || dup2(in, 0) < 0 || dup2(out_w, 1) < 0 || dup2(err_w, 2) < 0) die("dup2");
    }
    syscall(SYS_close_range, 3, SYNC_FD - 1, 0);
    syscall(SYS_close_range, SYNC_FD + 1, ~0U, 0);
    environ = S->env;
    execvp(S->argv[0], S->argv);  /* PATH from the container's environment (default /bin:/usr/bin) */
    int e = errno;
    dprintf(SYNC_FD, "err exec: %s: %s\n", strerror(e), S->argv[0]);
    _exit(127);
}

/* -- P1: the pid namespace, G, then the shim ------------------------------------------------- */

static int open_or_die(const char *path, int flags) {
    int fd = open(path, flags | O_CLOEXEC);
    if (fd < 0) dief("open %s", path);
    return fd;
}

int main(void) {
    if (fcntl(SYNC_FD, F_SETFD, FD_CLOEXEC) < 0) _exit(127);  /* G's copy closes when it execs */
    read_spec();
    parse_spec();
    syscall(SYS_close_range, SYNC_FD + 1, ~0U, 0);  /* nothing of the daemon's stays with the shim */
    if (strcmp(S->pid_mode, "new") == 0) {
        if (unshare(CLONE_NEWPID) < 0) die("unshare");
    } else if (strcmp(S->pid_mode, "join") == 0) {
        int fd = open_or_die(S->pid_ns_path, O_RDONLY);
        if (setns(fd, CLONE_NEWPID) < 0) dief("setns %s", S->pid_ns_path);
        close(fd);
    }
    /* stdin: the shim holds the FIFO read-write (no EOF while nobody is attached); G reads it. */
    int in_keep = S->stdin_path[0] ? open_or_die(S->stdin_path, O_RDWR) : -1;
    int in_r = S->stdin_path[0] && !S->tty ? open_or_die(S->stdin_path, O_RDONLY) : -1;
    int ctl = S->ctl_path[0] ? open_or_die(S->ctl_path, O_RDWR) : -1;
    int out[2] = {-1, -1}, err[2] = {-1, -1}, pty[2] = {-1, -1};
    if (S->tty) {  /* G opens its terminal in its own devpts and hands us the master over this socket */
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, pty) < 0) die("socketpair");
    } else if (pipe2(out, O_CLOEXEC) < 0 || pipe2(err, O_CLOEXEC) < 0) {
        die("pipe");
    }
    pid_t g = fork();
    if (g < 0) die("fork");
    if (g == 0) {
        if (S->tty) close(pty[0]);
        else { close(out[0]); close(err[0]); }
        container_init(in_r, out[1], err[1], pty[1]);
    }
    int out_r = out[0], err_r = err[0];
    if (S->tty) {
        close(pty[1]);
        char data;
        struct iovec iov = {.iov_base = &data, .iov_len = 1};
        union { char buf[CMSG_SPACE(sizeof(int))]; struct cmsghdr align; } u;
        struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.buf, .msg_controllen = sizeof(u.buf)};
        out_r = -1;
        if (recvmsg(pty[0], &msg, MSG_CMSG_CLOEXEC) > 0) {  /* nothing when G failed before (it said why) */
            struct cmsghdr *c = CMSG_FIRSTHDR(&msg);
            if (c && c->cmsg_type == SCM_RIGHTS) memcpy(&out_r, CMSG_DATA(c), sizeof(int));
        }
        if (out_r < 0) out_r = open("/dev/null", O_RDONLY | O_CLOEXEC);
        close(pty[0]);
    } else {
        close(out[1]);
        close(err[1]);
    }
    if (in_r >= 0) close(in_r);
    char line[32];
    int n = snprintf(line, sizeof(line), "pid %d\n", (int)g);
    if (write(SYNC_FD, line, (size_t)n) < 0) _exit(127);  /* the daemon is gone: G is its to kill */
    /* Become the plain shim (shim.c's usage): G stays our child across the exec. */
    int keep[] = {out_r, err_r, in_keep, ctl};
    for (int i = 0; i < 4; i++) {
        if (keep[i] >= 0 && fcntl(keep[i], F_SETFD, 0) < 0) die("fcntl");
    }
    char args[6][16];
    snprintf(args[0], sizeof(args[0]), "%d", (int)g);
    snprintf(args[1], sizeof(args[1]), "%d", out_r);
    snprintf(args[2], sizeof(args[2]), "%d", err_r);
    snprintf(args[3], sizeof(args[3]), "%d", in_keep);
    snprintf(args[4], sizeof(args[4]), "%d", ctl);
    snprintf(args[5], sizeof(args[5]), "%d", S->tty);
    char *argv[] = {S->shim, S->exit_file, S->log_path[0] ? S->log_path : "-", args[0], args[1], args[2],
                    args[3], args[4], args[5], S->attach_path[0] ? S->attach_path : "-", NULL};
    execv(S->shim, argv);
    dief("exec %s", S->shim);
    return 127;
}

/* The shim's two halves: launch.c starts a container (`shim --launch`), shim.c supervises it. */
#ifndef NODEAGENT_SHIM_H
#define NODEAGENT_SHIM_H
#include <sys/types.h>

struct shim_args {
    const char *exit_file;
    const char *log_path;  /* "-" discards the output */
    pid_t pid;             /* the container's init, our child */
    int out_fd, err_fd;    /* read ends of its stdout/stderr (out_fd: the pty master with tty; err_fd -1) */
    int stdin_fd, ctl_fd;  /* the held stdin FIFO and the control FIFO, or -1 */
    int tty;
};

/* Read the launch spec (fd 3), start the container, report on the sync pipe (fd 4); fill `a`. */
int launch_container(struct shim_args *a);

#endif

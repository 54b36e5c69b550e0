/* SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause */
/*
 * pgwu_daemon.c: the one way pgwu's long-running commands (`watch`, `reassemble`, `socket`, and
 * the watcher `load` starts) detach: a child in its own session, with nothing of the caller's but
 * stdio and a readiness pipe, that the caller waits for until it says it is ready or exits.
 */
#ifndef PGWU_DAEMON_H
#define PGWU_DAEMON_H

/* Runs run(arg, ready_fd) in a detached child: a new session, the caller's stdio, fd 3 the write
 * end of the readiness pipe, every other descriptor closed (not the caller's flock on PIN_DIR, not
 * its BPF objects). The child calls pgwu_daemon_ready() once it runs; errors before that reach the
 * caller's stderr. Returns the child's pid once it is ready, -ECHILD if it exited first (it said
 * why), or -errno. */
int pgwu_daemonize(int (*run)(void *arg, int ready_fd), void *arg);

/* In the child, once it runs: stdio onto /dev/null (stdout and stderr onto `log` when not NULL,
 * appended), one byte on *ready_fd, closed and set to -1. Nothing when *ready_fd < 0 (run in the
 * foreground). Returns 0 or -errno (the caller is gone). */
int pgwu_daemon_ready(int *ready_fd, const char *log);

/* A daemon's standard streams onto /dev/null (it outlives the terminal that started it). */
void stdio_to_devnull(void);

#endif

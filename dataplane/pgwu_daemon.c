// SPDX-License-Identifier: GPL-2.0 OR BSD-2-Clause
/*
 * pgwu_daemon.c: detach with a readiness handshake (pgwu_daemon.h). The caller prints "running as
 * pid N" only after the child said it runs: a child that fails at once (nothing loaded, a port in
 * use, no permission) makes the command fail with the child's own message, not report a daemon
 * that is already gone.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <unistd.h>
#include <sys/wait.h>
#include "pgwu_daemon.h"

void stdio_to_devnull(void)
{
	int fd = open("/dev/null", O_RDWR);

	if (fd < 0)
		return;
	dup2(fd, 0);
	dup2(fd, 1);
	dup2(fd, 2);
	if (fd > 2)
		close(fd);
}

int pgwu_daemon_ready(int *ready_fd, const char *log)
{
	int err = 0;

	if (*ready_fd < 0)
		return 0;
	fflush(stdout);
	fflush(stderr);
	stdio_to_devnull();
	if (log) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);

		if (fd >= 0) {
			dup2(fd, 1);
			dup2(fd, 2);
			close(fd);
		}
	}
	if (write(*ready_fd, "", 1) != 1)
		err = -errno;
	close(*ready_fd);
	*ready_fd = -1;
	return err;
}

int pgwu_daemonize(int (*run)(void *arg, int ready_fd), void *arg)
{
	int pfd[2], status;
	pid_t pid;
	char c;

	if (pipe2(pfd, O_CLOEXEC))
		return -errno;
	fflush(stdout);
	fflush(stderr);
	pid = fork();
	if (pid < 0) {
		int err = -errno;

		close(pfd[0]);
		close(pfd[1]);
		return err;
	}
	if (pid == 0) {
		close(pfd[0]);
		if (pfd[1] != 3 && dup2(pfd[1], 3) < 0)
			_exit(1);
		close_range(4, ~0U, 0);
		setsid();
		_exit(run(arg, 3) ? 1 : 0);
	}
	close(pfd[1]);
	if (read(pfd[0], &c, 1) != 1) {
		/* it exited before it was ready, and said why on our stderr */
		close(pfd[0]);
		waitpid(pid, &status, 0);
		return -ECHILD;
	}
	close(pfd[0]);
	return pid;
}

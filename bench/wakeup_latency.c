// SPDX-License-Identifier: GPL-2.0
/*
 * Wake-up latency of a real-time thread on one CPU, woken from another: how the lab's DUT receive
 * threads (SCHED_FIFO, on the DUT CPU) are woken by the generator's frames. Built and run by
 * bench/wakeup_latency.py.
 *
 *   wakeup_latency N PERIOD_US WAKER_CPU SLEEPER_CPU FIFO_PRIO
 *
 * The waker, pinned to WAKER_CPU, sleeps PERIOD_US, reads CLOCK_MONOTONIC and writes an eventfd; the
 * sleeper, pinned to SLEEPER_CPU at SCHED_FIFO FIFO_PRIO (0: SCHED_OTHER), blocked in read() on it,
 * reads the clock when it runs: the difference is one wake-up. Prints percentiles in us.
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

static int efd, n, cpu_b, prio;
static volatile uint64_t t_sent;
static volatile uint64_t *lat;

static uint64_t now(void)
{
	struct timespec t;

	clock_gettime(CLOCK_MONOTONIC, &t);
	return t.tv_sec * 1000000000ull + t.tv_nsec;
}

static void pin(int cpu)
{
	cpu_set_t s;

	CPU_ZERO(&s);
	CPU_SET(cpu, &s);
	if (sched_setaffinity(0, sizeof(s), &s)) {
		perror("Couldn't pin");
		exit(1);
	}
}

static void *sleeper(void *arg)
{
	struct sched_param p = { .sched_priority = prio };
	uint64_t v;

	pin(cpu_b);
	if (prio && sched_setscheduler(0, SCHED_FIFO, &p)) {
		perror("Couldn't set SCHED_FIFO");
		exit(1);
	}
	for (int i = 0; i < n; i++) {
		if (read(efd, &v, sizeof(v)) != sizeof(v)) {
			perror("Couldn't read the eventfd");
			exit(1);
		}
		lat[i] = now() - t_sent;
	}
	return NULL;
}

static int cmp(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
	int period_us, cpu_a;
	pthread_t th;

	if (argc != 6) {
		fprintf(stderr, "usage: wakeup_latency N PERIOD_US WAKER_CPU SLEEPER_CPU FIFO_PRIO\n");
		return 2;
	}
	n = atoi(argv[1]);
	period_us = atoi(argv[2]);
	cpu_a = atoi(argv[3]);
	cpu_b = atoi(argv[4]);
	prio = atoi(argv[5]);
	if (n < 10 || period_us < 1) {
		fprintf(stderr, "N >= 10 and PERIOD_US >= 1\n");
		return 2;
	}
	lat = calloc(n, sizeof(*lat));
	efd = eventfd(0, 0);
	if (!lat || efd < 0) {
		perror("Couldn't set up");
		return 1;
	}
	pthread_create(&th, NULL, sleeper, NULL);
	pin(cpu_a);
	usleep(100000);
	for (int i = 0; i < n; i++) {
		struct timespec d = { 0, period_us * 1000L };
		uint64_t one = 1;

		nanosleep(&d, NULL);
		t_sent = now();
		if (write(efd, &one, sizeof(one)) != sizeof(one)) {
			perror("Couldn't write the eventfd");
			return 1;
		}
		while (!lat[i])
			sched_yield();
	}
	pthread_join(th, NULL);
	qsort((void *)lat, n, sizeof(*lat), cmp);
	printf("%d %.1f %.1f %.1f %.1f %.1f\n", n, lat[n / 2] / 1e3, lat[n * 9 / 10] / 1e3,
	       lat[n * 99 / 100] / 1e3, lat[n * 999 / 1000] / 1e3, lat[n - 1] / 1e3);
	return 0;
}

/* SPDX-License-Identifier: MIT OR Apache-2.0 */
/*
 * The test libcufile's I/O threads: what NVIDIA's libcufile does with its thread pool
 * (cufile.json `execution.max_io_threads`, `parallel_io`): stream-ordered calls, batch entries and
 * the chunks of a large read or write are queued here and run by worker threads, not by the
 * thread that called the library, and the async and batch calls return before they run.
 */
#ifndef GDR_TEST_CUFILE_POOL_H
#define GDR_TEST_CUFILE_POOL_H

#include <pthread.h>

struct job {
	void (*run)(struct job *);
	struct job *next;  /* the pool's queue */
	struct job *after; /* stream order: runs once this one is done (NULL: at once) */
	int done;          /* under pool_lock */
	void *arg;         /* what `run` works on */
	long index;
};

/* Protects `done` of every job and what callers wait on with pool_wait_locked. */
extern pthread_mutex_t pool_lock;

/* Queues a job (pool_lock held); the workers start at the first job. */
void pool_submit_locked(struct job *j);
/* Waits (pool_lock held) until some job is done; `abs`: a CLOCK_REALTIME deadline or NULL.
 * Returns 0, or ETIMEDOUT. */
int pool_wait_locked(const struct timespec *abs);
/* Waits until `j` is done (pool_lock not held). */
void pool_wait(struct job *j);

#endif

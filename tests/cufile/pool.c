// SPDX-License-Identifier: MIT OR Apache-2.0
/* The test libcufile's worker threads (pool.h). */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>

#include "pool.h"

/* cufile.json's default `execution.max_io_threads` is 4. */
#define WORKERS 4

pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t queued = PTHREAD_COND_INITIALIZER;
static pthread_cond_t finished = PTHREAD_COND_INITIALIZER;
static struct job *head, *tail;
static int started;

static void *worker(void *unused)
{
	(void)unused;
	pthread_mutex_lock(&pool_lock);
	for (;;) {
		struct job *j;

		while (!head)
			pthread_cond_wait(&queued, &pool_lock);
		j = head;
		head = j->next;
		if (!head)
			tail = NULL;
		/* Jobs are taken in queue order, so the one it follows is running or done. */
		while (j->after && !j->after->done)
			pthread_cond_wait(&finished, &pool_lock);
		pthread_mutex_unlock(&pool_lock);
		j->run(j);
		pthread_mutex_lock(&pool_lock);
		j->done = 1;
		pthread_cond_broadcast(&finished);
	}
	return NULL;
}

void pool_submit_locked(struct job *j)
{
	int i;

	if (!started) {
		for (i = 0; i < WORKERS; i++) {
			pthread_t t;

			if (pthread_create(&t, NULL, worker, NULL) == 0) {
				pthread_detach(t);
				started++;
			}
		}
	}
	if (!started) {
		/* no thread could be made: run it here, as a library without a pool would */
		pthread_mutex_unlock(&pool_lock);
		j->run(j);
		pthread_mutex_lock(&pool_lock);
		j->done = 1;
		pthread_cond_broadcast(&finished);
		return;
	}
	j->done = 0;
	j->next = NULL;
	if (tail)
		tail->next = j;
	else
		head = j;
	tail = j;
	pthread_cond_signal(&queued);
}

int pool_wait_locked(const struct timespec *abs)
{
	if (!abs)
		return pthread_cond_wait(&finished, &pool_lock);
	return pthread_cond_timedwait(&finished, &pool_lock, abs);
}

void pool_wait(struct job *j)
{
	pthread_mutex_lock(&pool_lock);
	while (!j->done)
		pthread_cond_wait(&finished, &pool_lock);
	pthread_mutex_unlock(&pool_lock);
}

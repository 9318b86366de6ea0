/* Preloaded into the RDMA programs of tests/vm_rdma.rs: each ibv_dereg_mr stops the process
 * (SIGSTOP, the whole thread group) before the MR is released, so the test reads the kernel's
 * MR list (`rdma res show mr`) while that MR is still live, then resumes it (SIGCONT). Nothing
 * else of the program is touched: the real ibv_dereg_mr (libibverbs' default version, the one
 * gdr-trace hooks) runs right after. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

struct ibv_mr;

/* The process the test started and watches; a child it forks (which the test does not
 * watch) is never stopped. */
static pid_t watched;

__attribute__((constructor)) static void hold_dereg_init(void)
{
	watched = getpid();
}

int ibv_dereg_mr(struct ibv_mr *mr)
{
	static int (*real)(struct ibv_mr *);
	if (!real) {
		real = (int (*)(struct ibv_mr *))dlvsym(RTLD_NEXT, "ibv_dereg_mr", "IBVERBS_1.1");
		/* A caller dlopened with RTLD_LOCAL (UCX's modules) has libibverbs out of the
		 * global scope: take it by name (it is loaded: the caller links it). */
		void *verbs = real ? NULL : dlopen("libibverbs.so.1", RTLD_NOW | RTLD_NOLOAD);
		if (verbs)
			real = (int (*)(struct ibv_mr *))dlvsym(verbs, "ibv_dereg_mr", "IBVERBS_1.1");
		if (!real) {
			fprintf(stderr, "hold_dereg: no ibv_dereg_mr@IBVERBS_1.1: %s\n", dlerror());
			abort();
		}
	}
	if (getpid() == watched)
		raise(SIGSTOP);
	return real(mr);
}

/* SPDX-License-Identifier: GPL-2.0 OR MIT */
/*
 * gdrsim-workload: what its source files share (gdrsim-workload.c: the driver's own
 * interfaces; gdrsim-efa.c: the driver commands' registrations through libibverbs on
 * efa_sim0; gdrsim-verbs.c: registrations as applications make them through libibverbs;
 * gdrsim-mlx5.c: queues and DEVX UMEMs through libmlx5).
 */
#ifndef GDRSIM_WORKLOAD_H
#define GDRSIM_WORKLOAD_H

#include <stdint.h>
#include <stdio.h>

extern unsigned hold_secs;
extern int hold_stdin;
extern int no_release;
extern unsigned sends;
extern unsigned access_flags;
extern unsigned peer_flags; /* --flags: peer_mem_flags */
extern char comm[64];
extern int gdrsim_fd;
extern int failures;

/*
 * emit("peer_reg", ok, err, "addr", 'u', (uint64_t)x, "client", 's', str, NULL): one JSON
 * line; types: 'u' uint64_t, 'i' int64_t, 's' string, 'b' bool (int)
 */
void emit(const char *action, int ok, int err, ...);
#define U(k, v) k, 'u', (uint64_t)(v)
#define I(k, v) k, 'i', (int64_t)(v)
#define S(k, v) k, 's', (const char *)(v)
#define B(k, v) k, 'b', (int)(v)
void json_str(FILE *f, const char *s);

uint64_t parse_size(const char *s);
uint64_t gpu_round(uint64_t size);
void hold(void);
void gpu_open(void);
void gdrsim_open(void);
uint64_t gpu_alloc(uint64_t size);
void gpu_free(uint64_t va, uint64_t size);
const char *exporter_name(unsigned e);
int dmabuf_export(const char *which, uint64_t len, uint64_t *va_out, unsigned *exporter);
int dmabuf_export_va(uint64_t va, uint64_t len, unsigned exporter);
void *libcuda_sym(const char *name);
/* /sys/module/gdrsim/parameters/NAME: read (-1, reported, if it can't be), set (reported) */
int param_read(const char *name);
int param_set(const char *name, int v);

/* gdrsim-verbs.c (built only with libibverbs): a device opened with a PD */
struct ibv_device;
struct ibv_context;
struct ibv_pd;
struct verbs {
	struct ibv_device **list;
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	const char *name;
};
/* opens `want` (NULL: the first device) and allocates a PD; announce: report both on success */
int verbs_open(struct verbs *v, const char *want, int announce);
void verbs_close(struct verbs *v);

/* gdrsim-verbs.c (built only with libibverbs) */
int cmd_host_mr(uint64_t size);
int cmd_post_flood(uint64_t n);
int cmd_verbs_reg(const char *memory, uint64_t size);
int cmd_verbs_dmabuf(const char *which, uint64_t size, uint64_t offset);

/* gdrsim-efa.c (built only with libibverbs): peer, peer-legacy, free-callback, peer-host */
int cmd_efa_peer(const char *memory, uint64_t size, int legacy, int free_first);
int cmd_efa_dmabuf(const char *which, uint64_t size, uint64_t offset);
int cmd_efa_dmabuf_probe(void);

/* gdrsim-mlx5.c (built only with libmlx5): mlx5-queues, devx-umem, ibgda */
int cmd_mlx5(const char *cmd, int argc, char **argv);

#endif

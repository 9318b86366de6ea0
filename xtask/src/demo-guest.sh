#!/bin/sh
# Runs inside the demo VM: `gdr-trace watch` while real RDMA memory registrations happen on the
# soft-RoCE device rxe0: ibv_rc_pingpong (a real verbs program) and gdr-workload; then the
# storage path: cuFile reads (the test libcufile, through the simulated nvidia-fs), and
# cold, warm and O_DIRECT reads on an ext4 loop mount.
set -u
TRACE=$1
WORKLOAD=$2
DURATION=${3:-20}
STORAGE=${4:-}
LIBCUFILE=${5:-}
OUT=/tmp/gdr-trace.out

echo "### gdr-trace watch --duration $DURATION --interval 8   (every process on this VM)"
# --libcufile: the test cuFile library is not in the system's library paths (a real one is).
# --libcuda: the simulated driver's test libcuda, which IBGDA's doorbell mapping goes through.
LIBCUDA=${GDR_GDRSIM_LIBCUDA:-}
"$TRACE" watch --duration "$DURATION" --interval 8 ${LIBCUFILE:+--libcufile "$LIBCUFILE"} \
    ${LIBCUDA:+--libcuda "$LIBCUDA"} >"$OUT" 2>&1 &
TRACER=$!
tail -n +1 -f --pid=$TRACER "$OUT" &
TAIL=$!
# Registrations made before the hooks are attached are not seen: wait for the start line.
i=0
until grep -q "hooks attached" "$OUT" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 300 ] || ! kill -0 $TRACER 2>/dev/null; then echo "gdr-trace did not start"; exit 1; fi
    sleep 0.1
done

echo "### ibv_rc_pingpong server + client over rxe0 (100 round trips)"
ibv_rc_pingpong -d rxe0 -g 1 -n 100 >/tmp/pingpong-server.log 2>&1 &
SERVER=$!
ok=no
for attempt in 1 2 3 4 5; do
    sleep 1
    if ibv_rc_pingpong -d rxe0 -g 1 -n 100 127.0.0.1 >/tmp/pingpong-client.log 2>&1; then ok=yes; break; fi
done
[ $ok = yes ] && grep -h "bytes in" /tmp/pingpong-client.log | sed 's/^/    pingpong: /' \
    || { echo "    (pingpong client failed:)"; sed 's/^/    /' /tmp/pingpong-client.log; kill $SERVER 2>/dev/null; }
wait $SERVER 2>/dev/null

echo "### gdr-workload: host MRs of 4 KiB and 1 MiB (remote read/write), and one the kernel refuses"
"$WORKLOAD" 4096:1 1048576:7 bad:8192 --hold-ms 1500 >/dev/null

if [ -n "${GDR_GDRSIM_WORKLOAD:-}" ]; then
    # The simulated NVIDIA driver (tests/kmod): real symbol names, signatures and call order.
    SIM=$GDR_GDRSIM_WORKLOAD
    echo "### simulated GPU: peer-memory registration of 2 MiB of GPU memory (nvidia-peermem path)"
    "$SIM" --hold 1 peer 2097152 >/dev/null
    echo "### simulated GPU: dma-buf registrations, exporter nv_dmabuf and another exporter"
    "$SIM" --hold 1 dmabuf nv 4194304 >/dev/null
    "$SIM" dmabuf other 65536 >/dev/null
    echo "### simulated GPU: NCCL's dma-buf support probe (fd -1)"
    "$SIM" dmabuf-probe >/dev/null
    echo "### a process holding the GPU open but registering host memory (host-staged)"
    GDRSIM_IBDEV=rxe0 "$SIM" --hold 1 host-mr 1048576 >/dev/null
    echo "### simulated mlx5 NIC (mlx5_0, stock libmlx5): a CQ, an RC QP, an SRQ and a WQ beside one MR"
    echo "###   (their rings and doorbell page are queue memory, never registrations)"
    GDRSIM_IBDEV=mlx5_0 "$SIM" mlx5-queues >/dev/null
    echo "### NVSHMEM IBGDA's setup: send ring and doorbell records in GPU memory (DEVX UMEMs of a"
    echo "###   dma-buf), the GPU heap registered, the NIC's doorbell page mapped into the GPU"
    GDRSIM_IBDEV=mlx5_0 GDRSIM_LIBCUDA=$LIBCUDA "$SIM" ibgda >/dev/null
    echo "### the same without CAP_SYS_ADMIN and PeerMappingOverride: NVSHMEM's silent CPU fallback"
    GDRSIM_IBDEV=mlx5_0 GDRSIM_LIBCUDA=$LIBCUDA "$SIM" ibgda --no-sys-admin | grep -v '^{'
    echo "### GPUDirect Storage read through nvidia-fs (a P2P pin outside any RDMA registration)"
    "$SIM" nvfs-read /etc/os-release 4096 >/dev/null
fi

if [ -n "$STORAGE" ]; then
    # The VM's root (9p) has neither a page cache to speak of nor O_DIRECT: a real ext4.
    for m in $(echo "${GDR_STORAGE_KMODS:-}" | tr ':' ' '); do insmod "$m" 2>/dev/null; done
    D=/mnt/gdr-demo
    if truncate -s 64M /tmp/demo.img && mkfs.ext4 -q -F /tmp/demo.img && mkdir -p $D \
        && mount -o loop /tmp/demo.img $D; then
        echo "### storage: one process writes four files (and reads one of them once: warm)"
        "$STORAGE" create:$D/cold.bin:1M create:$D/warm.bin:1M create:$D/direct.bin:1M \
            create:$D/ckpt.bin:4M read:$D/warm.bin:64K:16 >/dev/null
        echo "### storage: another reads 2 MiB through cuFile (nvidia-fs: the simulated driver), then"
        echo "###          1 MiB each cold, warm and O_DIRECT in 4 KiB reads, and 1 MiB at random"
        # The libcufile the tracer hooks (--libcufile), whichever test build made the workload.
        ${LIBCUFILE:+env GDR_LIBCUFILE="$LIBCUFILE"} "$STORAGE" cufile-read:$D/ckpt.bin:1M:0 cufile-read:$D/ckpt.bin:1M:1M \
            read:$D/cold.bin:4K:256 read:$D/warm.bin:4K:256:pread read:$D/direct.bin:4K:256:direct \
            read:$D/warm.bin:4K:256:random >/dev/null
    else
        echo "### storage: no ext4 loop mount here; skipped"
    fi
fi

wait $TRACER
wait $TAIL 2>/dev/null

# README's five-minute path, step 2: which hooks attach here, grouped, on an 80-column screen.
echo
echo "### gdr-trace probes   (80 columns)"
COLUMNS=80 "$TRACE" probes

if [ -n "${GDR_GDRSIM_WORKLOAD:-}" ]; then
    # README's five-minute path, step 3: attach to one process by PID. The process waits on a
    # fifo until the tracer's hooks are in, then registers GPU memory (nvidia-peermem path).
    echo
    echo "### gdr-trace attach PID   (one process: a GPU registration made after attach)"
    rm -f /tmp/demo-go && mkfifo /tmp/demo-go
    sh -c 'read go </tmp/demo-go; exec "$0" --hold 1 peer 2097152 >/dev/null' "$GDR_GDRSIM_WORKLOAD" &
    P=$!
    "$TRACE" attach $P >"$OUT.attach" 2>&1 &
    T=$!
    i=0
    until grep -q "hooks attached" "$OUT.attach" 2>/dev/null; do
        i=$((i + 1))
        if [ $i -gt 300 ] || ! kill -0 $T 2>/dev/null; then echo "gdr-trace attach did not start"; break; fi
        sleep 0.1
    done
    echo go >/tmp/demo-go
    wait $T
    cat "$OUT.attach"
fi

#!/bin/sh
# Runs inside the demo VM: `gdr-trace watch` while real RDMA memory registrations happen on the
# soft-RoCE device rxe0: ibv_rc_pingpong (a real verbs program) and gdr-workload.
set -u
TRACE=$1
WORKLOAD=$2
DURATION=${3:-20}
OUT=/tmp/gdr-trace.out

echo "### gdr-trace watch --duration $DURATION --interval 8   (every process on this VM)"
"$TRACE" watch --duration "$DURATION" --interval 8 >"$OUT" 2>&1 &
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
    echo "### GPUDirect Storage read through nvidia-fs (a P2P pin outside any RDMA registration)"
    "$SIM" nvfs-read /etc/os-release 4096 >/dev/null
fi

wait $TRACER
wait $TAIL 2>/dev/null

#!/bin/sh
# PID 1 of the gdr-trace test VM (busybox ash, from the initramfs that xtask/src/initramfs.rs
# builds). Loads the modules, mounts the host's / (read-only 9p + tmpfs overlay) at /newroot,
# sets up soft-RoCE and runs /gdr-vm/run.sh chrooted there. ttyS0 is the console: markers
# and errors. The command's output (stdout and stderr together) goes to `output` in the run's
# host dir (9p tag gdrrun), which the host tails: much faster than a serial port.
export PATH=/bin
/bin/busybox --install -s /bin
. /gdr-vm/config

fail() {
	echo "GDR-VM-FAIL:$NONCE:$*"
	poweroff -f
	sleep 60
}

mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
hostname gdr-vm

for m in /modules/*.ko; do
	insmod "$m" || fail "insmod $m"
done

P9=trans=virtio,version=9p2000.L,msize=512000
mkdir -p /gdrrun
mount -t 9p -o "$P9" gdrrun /gdrrun || fail "mount the run dir over 9p"
mount -t 9p -o "$P9,cache=loose,ro" hostroot /lower || fail "mount host root over 9p"
mount -t tmpfs -o mode=0755 tmpfs /ovl || fail "mount tmpfs"
mkdir -p /ovl/upper /ovl/work
mount -t overlay overlay -o lowerdir=/lower,upperdir=/ovl/upper,workdir=/ovl/work /newroot ||
	fail "mount overlay"

R=/newroot
mount -t proc proc $R/proc || fail "mount proc"
mount -t sysfs sysfs $R/sys || fail "mount sysfs"
mount -t devtmpfs devtmpfs $R/dev || fail "mount devtmpfs"
mkdir -p $R/dev/pts $R/dev/shm
mount -t devpts -o newinstance,ptmxmode=0666 devpts $R/dev/pts
mount -t tmpfs -o mode=1777 tmpfs $R/dev/shm
mount -t tracefs tracefs $R/sys/kernel/tracing || fail "mount tracefs"
mount -t debugfs debugfs $R/sys/kernel/debug || fail "mount debugfs"
mount -t bpf bpf $R/sys/fs/bpf || fail "mount bpffs"
mount -t securityfs securityfs $R/sys/kernel/security || fail "mount securityfs"
mount -t cgroup2 cgroup2 $R/sys/fs/cgroup || fail "mount cgroup2"
mkdir -p "$R$SHARE"
mount -t 9p -o "$P9" hostshare "$R$SHARE" || fail "mount share dir $SHARE"

chroot $R ip link set lo up || fail "ip link set lo up"
chroot $R rdma link add rxe0 type rxe netdev lo || fail "rdma link add rxe0"

while IFS= read -r m; do
	[ -n "$m" ] || continue
	chroot $R insmod "$m" || fail "insmod $m"
done </gdr-vm/insmod

mkdir -p $R/run/gdr-vm
cp /gdr-vm/run.sh $R/run/gdr-vm/run.sh

# The command writes into a pipe (no isatty, as under `cargo test`); cat copies it out.
mkfifo /out
cat /out >/gdrrun/output &
cat_pid=$!
echo "GDR-VM-START:$NONCE"
# A run that has not ended by then is probably hung: say what each process waits on (its
# state, wait channel and kernel stack), so that a timeout names its cause. The host shows
# the lines from the HANG marker on in its failure message.
(
	sleep "$HANG_AFTER"
	echo "GDR-VM-HANG:$NONCE: still running after $HANG_AFTER s; processes (pid state wchan cmdline):"
	for d in /proc/[0-9]*; do
		cmd=$(tr '\0' ' ' <"$d/cmdline" 2>/dev/null | cut -c1-160)
		[ -n "$cmd" ] || continue # a kernel thread (procfs files have no size to test)
		set -- $(sed 's/.*) //' "$d/stat" 2>/dev/null)
		echo "  ${d#/proc/} $1 $(cat "$d/wchan" 2>/dev/null) $cmd"
		case "$1" in D | S) sed 's/^/      /' "$d/stack" 2>/dev/null | head -12 ;; esac
	done
	echo "GDR-VM-HANG-END:$NONCE"
) &
chroot $R /usr/bin/env -i /bin/sh /run/gdr-vm/run.sh </dev/null >/out 2>&1
rc=$?
# Wait for cat to drain the pipe, but not for background processes that keep it open.
(sleep 3 && kill $cat_pid 2>/dev/null) &
wait $cat_pid
sync
echo "GDR-VM-EXIT:$NONCE:$rc"
poweroff -f
sleep 60

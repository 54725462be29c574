# Runs as root (PID 1) in the rootless guest's root: sets up what a host with cgroup v2
# and a delegating systemd would have, then runs check.py as the ordinary user alice,
# once in a cgroup delegated to her and once in one that is not.
bb=/opt/busybox
export PATH=/usr/sbin:/usr/bin:/sbin:/bin
$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb mount -t devtmpfs devtmpfs /dev
$bb mount -t tmpfs -o mode=1777 tmpfs /tmp
$bb mount -t tmpfs -o mode=0755 tmpfs /run
$bb mount -t cgroup2 cgroup2 /sys/fs/cgroup
$bb ip link set lo up
echo 'alice:x:2000:2000:alice:/home/alice:/bin/sh' >> /etc/passwd
echo 'alice:x:2000:' >> /etc/group
echo 'alice:100000:65536' > /etc/subuid
echo 'alice:100000:65536' > /etc/subgid
$bb mkdir -p /home/alice
$bb chown 2000:2000 /home/alice
echo '+memory +cpu +pids' > /sys/fs/cgroup/cgroup.subtree_control

# As systemd delegates a unit: the folder and the files that move processes and
# enable controllers belong to the user.
delegated=/sys/fs/cgroup/alice
$bb mkdir $delegated
for file in "" cgroup.procs cgroup.subtree_control cgroup.threads; do
    $bb chown 2000:2000 "$delegated/$file"
done
plain=/sys/fs/cgroup/plain
$bb mkdir $plain

# busybox's sh runs its own applets before PATH's programs: util-linux's setpriv is
# named by its path.
as_alice() {
    cgroup=$1
    shift
    $bb sh -c 'echo $$ > "$0/cgroup.procs" && exec "$@"' "$cgroup" \
        /usr/bin/setpriv --reuid=2000 --regid=2000 --clear-groups \
        env -i HOME=/home/alice PATH=/usr/bin:/bin RUNNER_POOL_SIZE=1 "$@"
}
as_alice $delegated python3 /opt/t/check.py delegated
as_alice $plain python3 /opt/t/check.py plain
echo ROOTLESS-DONE
$bb sync
$bb poweroff -f

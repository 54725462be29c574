#!/bin/busybox sh
# The initramfs's /init of the rootless guest test (crates/mcp-bin/tests/rootless_guest.rs),
# in place of our agent's: loads the image's modules, makes the root image writable
# with an overlay, adds what the test brought on the second disk, and switches to it.
/bin/busybox mkdir -p /sbin /usr/bin /usr/sbin
/bin/busybox --install -s
export PATH=/bin:/sbin:/usr/bin:/usr/sbin
mount -t devtmpfs devtmpfs /dev
mount -t proc proc /proc
mount -t sysfs sysfs /sys
for module in $(ls /modules | sort); do
    insmod "/modules/$module" || echo "ROOTLESS-CHECK boot FAIL insmod $module"
done
tries=0
while [ ! -b /dev/vdb ] && [ "$tries" -lt 100 ]; do sleep 0.1; tries=$((tries + 1)); done
# Which disk is which: the test's own is labelled "extra".
extra=$(findfs LABEL=extra)
root=/dev/vda
[ "$extra" = /dev/vda ] && root=/dev/vdb
mkdir -p /lower /upper /newroot
mount -o ro "$root" /lower
mount -t tmpfs -o mode=0755 tmpfs /upper
mkdir -p /upper/u /upper/w
mount -t overlay overlay -o lowerdir=/lower,upperdir=/upper/u,workdir=/upper/w /newroot
mkdir -p /newroot/opt/t
mount -o ro "$extra" /newroot/opt/t
# The uidmap helpers (setuid root), and the libraries they load that the root image
# lacks: its own, such as libc, stay (file by file: busybox's cp -n skips a whole
# folder that exists).
cd /newroot/opt/t/root
find . -type f | while read -r file; do
    mkdir -p "/newroot/${file%/*}"
    cp -an "$file" "/newroot/$file"
done
cd /
cp /bin/busybox /newroot/opt/busybox
exec switch_root /newroot /opt/busybox sh /opt/t/check.sh

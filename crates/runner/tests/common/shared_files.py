# What a sandbox sees of every file it may share with another sandbox, or with a later
# one on its slot: its device nodes, the sources of its /proc masks (an empty file and
# an empty folder), the system files and folders shown to every sandbox. With ATTACK set
# (by the test, above this text) it first tries every change a program can make to
# them: times set to now and to a chosen time, the mode (to what it is), the owner (to
# what it is), an extended attribute. One JSON line: the sandbox's slot (its uid map),
# each file's identity (device, inode and birth: a new tmpfs may get a device number and
# inode numbers used before), mode, owner, times and attributes, and what the attack
# changed.
import ctypes, errno, json, os

CHOSEN_NS = 1_000_000_000 * 10**9  # 2001-09-09 01:46:40: no file here has that time
DEVICES = ["/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom"]
MASKED = """cmdline config.gz kallsyms kcore keys key-users timer_list timer_stats
sched_debug schedstat latency_stats modules kmsg kpagecount kpageflags kpagecgroup
sysrq-trigger iomem ioports vmallocinfo slabinfo pagetypeinfo buddyinfo zoneinfo interrupts
softirqs locks diskstats partitions swaps devices mtrr dma misc consoles bootconfig mdstat
execdomains crypto acpi asound scsi bus fs irq driver tty pressure dynamic_debug
device-tree""".split()
SYSTEM = ["/usr/bin/python3", "/etc/ld.so.cache", "/etc/passwd", "/opt/packages",
          "/opt/deps", "/dev", "/"]


def paths():
    """Those this sandbox has; of /proc, the masks only (the rest is its own /proc's)."""
    own_proc = os.stat("/proc").st_dev
    masked = ["/proc/" + name for name in MASKED]
    present = [p for p in DEVICES + masked + SYSTEM if os.path.lexists(p)]
    return [p for p in present if os.stat(p).st_dev != own_proc]


LIBC = ctypes.CDLL(None, use_errno=True)
STATX_BTIME = 0x800


def birth(path):
    """The file's birth time in ns (statx), 0 where its file system keeps none."""
    buf = ctypes.create_string_buffer(256)
    if LIBC.statx(-100, os.fsencode(path), 0, STATX_BTIME, buf) != 0:
        return 0
    if not int.from_bytes(buf.raw[0:4], "little") & STATX_BTIME:
        return 0
    seconds = int.from_bytes(buf.raw[80:88], "little", signed=True)
    return seconds * 10**9 + int.from_bytes(buf.raw[88:92], "little")


def look(path):
    s = os.stat(path)
    try:
        names = sorted(os.listxattr(path))
    except OSError:
        names = []
    return [s.st_dev, s.st_ino, birth(path), s.st_mode, s.st_uid, s.st_gid,
            s.st_atime_ns, s.st_mtime_ns, s.st_ctime_ns, names]


def attacks(path):
    mode = os.stat(path).st_mode & 0o7777
    return {
        "utime-now": lambda: os.utime(path),
        "utime-chosen": lambda: os.utime(path, ns=(CHOSEN_NS, CHOSEN_NS)),
        "chmod": lambda: os.chmod(path, mode),
        "chown": lambda: os.chown(path, -1, -1),
        "setxattr": lambda: os.setxattr(path, "user.sandbox", b"1"),
    }


slot = open("/proc/self/uid_map").read().split("\n")[0].split()
result = {"slot": slot, "before": {p: look(p) for p in paths()}}
if ATTACK:
    changed, refused = [], {}
    for path in paths():
        for name, attack in attacks(path).items():
            try:
                attack()
                changed.append(f"{path} {name}")
            except OSError as e:
                code = errno.errorcode.get(e.errno, str(e.errno))
                refused[code] = refused.get(code, 0) + 1
    result["changed"] = changed
    result["refused"] = refused
    result["after"] = {p: look(p) for p in paths()}
print(json.dumps(result))

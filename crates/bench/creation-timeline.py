#!/usr/bin/env python3
"""Wall-clock steps of making one sandbox, from an strace of a runner with one slot.

    strace -f --seccomp-bpf -ttt -e trace=execve,execveat,clone,clone3,mkdir,rmdir,\
pivot_root,seccomp,sendto,kill -o TRACE sandbox-runner serve --pool-size 1 ...
    crates/bench/creation-timeline.py TRACE

With --seccomp-bpf only the traced calls stop the process, so the rest runs at full
speed. Each creation is cut at its cgroup mkdir; steps are the times between
milestones, medians over every creation in the trace (the first is left out: it is
made before the runner listens, while the runner itself is still starting).
"""

import re
import statistics
import sys

MILESTONES = [
    ("cgroup made", re.compile(r'mkdir\("/sys/fs/cgroup/[^"]*/sb\d+", .*= 0')),
    ("jail executed", re.compile(r'execve\("/proc/self/exe".* = 0')),
    ("namespaces cloned", re.compile(r"clone\(.*CLONE_NEWUSER.*= \d+")),
    ("root built, pivot_root", re.compile(r"pivot_root\(")),
    ("seccomp installed", re.compile(r"seccomp\(.*len=4,")),
    ("agent executed", re.compile(r"execveat\(")),
    ("agent Ready", re.compile(r'sendto\(.*"type\\":\\"ready')),
    ("Prepare sent", re.compile(r'sendto\(.*"prepare\\"')),
    ("interpreter executed", re.compile(r'execve\("/usr/bin/(python3|node)".* = 0')),
    ("agent Ready again", re.compile(r'sendto\(.*"type\\":\\"ready')),
]


def creations(lines):
    """Yields the milestone times of each creation, in order."""
    current = None
    for line in lines:
        parts = line.split(None, 2)
        if len(parts) < 3:
            continue
        try:
            t = float(parts[1])
        except ValueError:
            continue
        if MILESTONES[0][1].search(parts[2]):
            if current:
                yield current
            current = {"cgroup made": t}
            continue
        if current is None:
            continue
        for name, pattern in MILESTONES[1:]:
            if name not in current and pattern.search(parts[2]):
                if list(current)[-1] == previous(name):
                    current[name] = t
                break
    if current:
        yield current


def previous(name):
    names = [n for n, _ in MILESTONES]
    return names[names.index(name) - 1]


def main():
    with open(sys.argv[1]) as f:
        made = [c for c in creations(f) if len(c) >= 7][1:]
    if not made:
        sys.exit("no complete creation in the trace")
    names = [n for n, _ in MILESTONES]
    print(f"{len(made)} creations; median ms from the previous step:")
    total = []
    for a, b in zip(names, names[1:]):
        steps = [(c[b] - c[a]) * 1e3 for c in made if a in c and b in c]
        if steps:
            print(f"  {b:<24} {statistics.median(steps):7.2f}")
    for c in made:
        total.append((c[list(c)[-1]] - c["cgroup made"]) * 1e3)
    print(f"  {'total':<24} {statistics.median(total):7.2f}")


if __name__ == "__main__":
    main()

"""What warm imports cost and save: an idle loader's memory, the time to get it idle, and
the time a program's `import pandas, matplotlib.pyplot` takes, without and with them, and
its first plot (plot and show: one figure-1.png).

    python3 crates/packages/tests/python/measure_warm.py [REPEATS]

Uses test_plots.py's harness (same packages folder, same interpreter). Medians of
REPEATS (default 5) runs; "fresh font cache" starts each interpreter with an empty
MPLCONFIGDIR, as a new sandbox's home would be.
"""

import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
import test_plots as harness  # noqa: E402

PROGRAM = """
import time
start = time.perf_counter()
import pandas, matplotlib.pyplot
imported = time.perf_counter()
matplotlib.pyplot.plot([1, 2])
matplotlib.pyplot.show()
print(imported - start, time.perf_counter() - imported)
"""


MODULE_SETS = ("", "numpy", "numpy,pandas", "matplotlib.pyplot", harness.WARM)


def rss_kib(pid):
    """VmRSS and its anonymous part (RssAnon: the heap, what no other process shares)."""
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        fields[name] = value.split()[0] if value.split() else ""
    return int(fields["VmRSS"]), int(fields["RssAnon"])


def measure(modules, fresh_font_cache):
    with tempfile.TemporaryDirectory() as tmp:
        home = Path(tmp) / "home"
        home.mkdir()
        env = {"MPLCONFIGDIR": str(Path(tmp) / "mpl")} if fresh_font_cache else {}
        started = time.perf_counter()
        loader = harness.Loader(home, modules=modules, env=env)
        try:
            loader.wait_idle()
            ready = time.perf_counter() - started
            rss = rss_kib(loader.process.pid)
            code, out, err = loader.run_once(PROGRAM)
            if code != 0:
                raise RuntimeError(err)
            imports, plot = map(float, out.split())
            return rss[0], rss[1], ready, imports, plot
        finally:
            loader.close()


def main():
    if not harness.HAVE_MATPLOTLIB:
        sys.exit(harness.SKIP_REASON)
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    print(f"{harness.PYTHON}, packages {harness.PKGS}, median of {repeats}")
    print(f"{'loader':<52} {'idle RSS':>10} {'anon':>10} {'ready in':>9} {'import':>9} {'1st plot':>9}")
    for fresh in (False, True):
        for modules in ("", harness.WARM) if fresh else MODULE_SETS:
            runs = [measure(modules, fresh) for _ in range(repeats)]
            rss, anon, ready, imports, plot = (statistics.median(r[i] for r in runs)
                                               for i in range(5))
            label = ("warm " + modules if modules else "no warm imports") + (
                ", fresh font cache" if fresh else "")
            print(f"{label:<52} {rss / 1024:>6.1f} MiB {anon / 1024:>6.1f} MiB {ready * 1000:>6.0f} ms "
                  f"{imports * 1000:>6.1f} ms {plot * 1000:>6.0f} ms")


if __name__ == "__main__":
    try:
        main()
    finally:
        import shutil
        shutil.rmtree(harness.MPLCONFIGDIR, ignore_errors=True)

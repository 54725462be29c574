"""The Python loader's warm imports and import paths, and the sandbox_plots backend.

Drives crates/agent/src/agent/loader/python.py as the agent does: `python3 -c LOADER MODULES`
with requests on descriptor 3 and a session's reports on descriptor 4, real interpreter
and real packages, no mocks. A temporary folder stands in for /home/sandbox (the working
directory), and SANDBOX_OUTPUTS_DIR points the backend at its outputs/.

    /usr/bin/python3 -m pip install --target /var/tmp/plots-pkgs numpy pandas matplotlib seaborn
    python3 crates/packages/tests/python/test_plots.py -v

PLOTS_TEST_PKGS names the packages folder (default /var/lib/sandbox-runner/packages/current/python, the set `sandbox-runner packages build` makes): without
matplotlib there, every test is skipped, and says so. PLOTS_TEST_PYTHON names the
interpreter (default /usr/bin/python3, the sandboxes' own).
"""

import fcntl
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[4]
LOADER = (ROOT / "crates/agent/src/agent/loader/python.py").read_text()
BACKEND_DIR = ROOT / "crates/packages/src/python"
PKGS = Path(os.environ.get("PLOTS_TEST_PKGS", "/var/lib/sandbox-runner/packages/current/python"))
PYTHON = os.environ.get("PLOTS_TEST_PYTHON", "/usr/bin/python3")
WARM = "numpy,pandas,matplotlib.pyplot"
PNG = b"\x89PNG\r\n\x1a\n"
TIMEOUT = 120

HAVE_MATPLOTLIB = (PKGS / "matplotlib").is_dir()
SKIP_REASON = (f"no matplotlib in {PKGS} (set PLOTS_TEST_PKGS, or: {PYTHON} -m pip "
               f"install --target {PKGS} numpy pandas matplotlib seaborn)")
if not HAVE_MATPLOTLIB:
    print(f"test_plots: SKIPPING every test: {SKIP_REASON}", file=sys.stderr)

# One font cache for every interpreter the tests start, built once.
MPLCONFIGDIR = tempfile.mkdtemp(prefix="plots-mplconfig-")


def _give(pairs):
    """In the child: descriptor `from` becomes `to`, for each pair, as launch.rs does
    (copies above every target first, so that placing one never clobbers another)."""
    def place():
        copies = [fcntl.fcntl(src, fcntl.F_DUPFD_CLOEXEC, 10) for src, _ in pairs]
        for copy, (_, dst) in zip(copies, pairs):
            os.dup2(copy, dst)  # inheritable
    return place


class Loader:
    """A waiting loader, as the agent prepares it, in the home folder `home`."""

    def __init__(self, home, modules=WARM, pythonpath=None, env=None):
        self.home = Path(home)
        go_r, self.go = os.pipe()
        self.done, done_w = os.pipe()
        self.out_path = self.home.parent / f"{self.home.name}.stdout"
        self.err_path = self.home.parent / f"{self.home.name}.stderr"
        args = [PYTHON, "-c", LOADER] + ([] if modules is None else [modules])
        if pythonpath is None:
            pythonpath = [str(PKGS), str(BACKEND_DIR)]
        environ = {
            "PATH": "/usr/local/bin:/usr/bin:/bin",
            "HOME": str(self.home),
            "LANG": "C.UTF-8",
            "TMPDIR": "/tmp",
            "PYTHONPATH": ":".join(pythonpath),
            "MPLBACKEND": "module://sandbox_plots",
            "MPLCONFIGDIR": MPLCONFIGDIR,
            "SANDBOX_OUTPUTS_DIR": str(self.home / "outputs"),
        }
        environ.update(env or {})
        with open(self.out_path, "wb") as out, open(self.err_path, "wb") as err:
            self.process = subprocess.Popen(
                args, cwd=self.home, env=environ, stdin=subprocess.DEVNULL,
                stdout=out, stderr=err, close_fds=False,
                preexec_fn=_give([(go_r, 3), (done_w, 4)]))
        os.close(go_r)
        os.close(done_w)
        self.runs = 0
        self.warming = bool(modules and modules.strip(" ,"))

    def write_program(self, code):
        path = self.home / "main.py"
        path.write_text(textwrap.dedent(code))
        return str(path)

    def request(self, code, session, paths=None, early=False):
        """Sends a request; first, unless `early`, lets the warm imports finish (as a
        pool at rest does: a request that arrives sooner stops them)."""
        if self.warming and not early:
            self.wait_idle()
            self.warming = False
        self.runs += 1
        job = {"path": self.write_program(code), "session": session, "run": self.runs}
        if paths is not None:
            job["paths"] = paths
        os.write(self.go, json.dumps(job).encode() + b"\n")

    def run_once(self, code, paths=None, early=False):
        """A one-shot run: (exit code, stdout, stderr)."""
        self.request(code, False, paths, early)
        os.close(self.go)
        self.go = None
        code = self.process.wait(TIMEOUT)
        os.close(self.done)
        self.done = None
        return code, self.stdout(), self.stderr()

    def run_in_session(self, code, paths=None):
        """A session's run: its report on descriptor 4."""
        self.request(code, True, paths)
        line = b""
        while not line.endswith(b"\n"):
            ready, _, _ = select.select([self.done], [], [], TIMEOUT)
            if not ready:
                raise AssertionError(f"no report within {TIMEOUT}s: {self.stderr()}")
            chunk = os.read(self.done, 256)
            if not chunk:
                raise AssertionError(f"the loader exited: {self.stderr()}")
            line += chunk
        return json.loads(line)

    def stdout(self):
        return self.out_path.read_text()

    def stderr(self):
        return self.err_path.read_text()

    def wait_idle(self):
        """Returns once the loader is blocked reading its request (descriptor 3)."""
        deadline = time.monotonic() + TIMEOUT
        while time.monotonic() < deadline:
            try:
                syscall = Path(f"/proc/{self.process.pid}/syscall").read_text().split()
            except OSError:
                syscall = []
            if syscall[:2] == ["0", "0x3"]:  # read(3, ...) on x86_64
                return
            if self.process.poll() is not None:
                raise AssertionError(f"the loader exited: {self.stderr()}")
            time.sleep(0.01)
        raise AssertionError("the loader never waited for its request")

    def close(self):
        for fd in (self.go, self.done):
            if fd is not None:
                os.close(fd)
        self.go = self.done = None
        if self.process.poll() is None:
            try:
                self.process.wait(TIMEOUT)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


@unittest.skipUnless(HAVE_MATPLOTLIB, SKIP_REASON)
class LoaderTest(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="plots-test-"))
        self.home = self.tmp / "home"
        self.home.mkdir()
        self.outputs = self.home / "outputs"
        self.loaders = []

    def tearDown(self):
        for loader in self.loaders:
            loader.close()
        shutil.rmtree(self.tmp)

    def loader(self, **kwargs):
        loader = Loader(self.home, **kwargs)
        self.loaders.append(loader)
        return loader

    def once(self, code, **kwargs):
        paths = kwargs.pop("paths", None)
        return self.loader(**kwargs).run_once(code, paths)

    def outputs_list(self):
        return sorted(p.name for p in self.outputs.iterdir()) if self.outputs.exists() else []

    def assert_png(self, name):
        data = (self.outputs / name).read_bytes()
        self.assertTrue(data.startswith(PNG), f"{name} is not a PNG: {data[:16]!r}")
        return data

    def assert_clean(self, result, stdout=""):
        code, out, err = result
        self.assertEqual((code, out, err), (0, stdout, ""))


class PlotsTest(LoaderTest):
    def test_show_saves_every_open_figure_as_a_png(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.show()
            print("shown")
        """), "shown\n")
        self.assertEqual(self.outputs_list(), ["figure-1.png"])
        self.assert_png("figure-1.png")

    def test_a_figure_open_at_exit_is_saved(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.figure(figsize=(2, 1))
            plt.plot([1, 2])
        """))
        data = self.assert_png("figure-1.png")
        # 2x1 inches at the default 100 dpi: the IHDR chunk holds width and height.
        self.assertEqual((int.from_bytes(data[16:20], "big"), int.from_bytes(data[20:24], "big")),
                         (200, 100))

    def test_a_figure_open_at_exit_is_saved_after_an_error_or_exit(self):
        code, out, err = self.once("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            raise SystemExit(3)
        """)
        self.assertEqual((code, out, err), (3, "", ""))
        self.assert_png("figure-1.png")

    def test_two_shows_make_two_files(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.show()
            plt.plot([2, 1])
            plt.show()
        """))
        self.assertEqual(self.outputs_list(), ["figure-1.png", "figure-2.png"])
        self.assertNotEqual(self.assert_png("figure-1.png"), self.assert_png("figure-2.png"))

    def test_one_show_saves_all_open_figures_by_number(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.figure(2); plt.plot([1, 2])
            plt.figure(1); plt.plot([1, 2, 3]); plt.title("first")
            plt.show()
            print(plt.get_fignums())
        """), "[]\n")
        self.assertEqual(self.outputs_list(), ["figure-1.png", "figure-2.png"])

    def test_no_figures_no_files(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.show()
            plt.figure()  # empty: nothing to show
            print("none")
        """), "none\n")
        self.assertEqual(self.outputs_list(), [])
        self.assertFalse(self.outputs.exists())

    def test_a_failed_matplotlib_import_writes_nothing(self):
        # The backend is named but no matplotlib is to be found.
        self.assert_clean(self.once("""
            try:
                import matplotlib.pyplot
            except ImportError:
                print("no matplotlib")
        """, modules="", pythonpath=[str(BACKEND_DIR)]), "no matplotlib\n")
        self.assertFalse(self.outputs.exists())

    def test_an_existing_file_is_never_overwritten(self):
        self.outputs.mkdir()
        (self.outputs / "figure-1.png").write_bytes(b"mine")
        (self.outputs / "figure-3.png").write_bytes(b"mine too")
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            for i in range(2):
                plt.plot([i, 2])
                plt.show()
        """))
        self.assertEqual((self.outputs / "figure-1.png").read_bytes(), b"mine")
        self.assertEqual((self.outputs / "figure-3.png").read_bytes(), b"mine too")
        self.assertEqual(self.outputs_list(),
                         ["figure-1.png", "figure-2.png", "figure-3.png", "figure-4.png"])
        self.assert_png("figure-2.png")
        self.assert_png("figure-4.png")

    def test_savefig_then_close_is_not_saved_again(self):
        self.outputs.mkdir()  # as the agent makes it
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.savefig("outputs/x.png")
            plt.close()
        """))
        self.assertEqual(self.outputs_list(), ["x.png"])
        self.assert_png("x.png")

    def test_savefig_left_open_is_shown_too_as_in_a_notebook(self):
        self.outputs.mkdir()  # as the agent makes it
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.savefig("outputs/x.png")
        """))
        self.assertEqual(self.outputs_list(), ["figure-1.png", "x.png"])

    def test_the_figures_own_dpi(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            plt.figure(figsize=(2, 1), dpi=50)
            plt.plot([1, 2])
        """))
        data = self.assert_png("figure-1.png")
        self.assertEqual(int.from_bytes(data[16:20], "big"), 100)

    def test_pandas_plot(self):
        self.assert_clean(self.once("""
            import pandas as pd
            import matplotlib.pyplot as plt
            df = pd.DataFrame({"a": [1, 3, 2], "b": [2, 1, 3]})
            df.plot()
            plt.show()
        """))
        self.assert_png("figure-1.png")

    @unittest.skipUnless((PKGS / "seaborn").is_dir(), f"no seaborn in {PKGS}")
    def test_seaborn(self):
        self.assert_clean(self.once("""
            import pandas as pd
            import seaborn as sns
            df = pd.DataFrame({"x": [1, 2, 2, 3, 3, 3], "k": list("ababab")})
            sns.histplot(data=df, x="x", hue="k")
        """))
        self.assert_png("figure-1.png")

    def test_fig_show_saves_with_the_others(self):
        self.assert_clean(self.once("""
            import matplotlib.pyplot as plt
            fig, ax = plt.subplots()
            ax.plot([1, 2])
            fig.show()
        """))
        self.assertEqual(self.outputs_list(), ["figure-1.png"])


class SessionTest(LoaderTest):
    def test_figures_left_open_are_saved_after_each_run(self):
        loader = self.loader()
        report = loader.run_in_session("""
            import pandas as pd
            df = pd.DataFrame({"a": [1, 3, 2]})
            df.plot()
        """)
        self.assertEqual(report, {"exit": 0, "run": 1})
        self.assertEqual(self.outputs_list(), ["figure-1.png"])
        self.assert_png("figure-1.png")

        report = loader.run_in_session("""
            import matplotlib.pyplot as plt
            df.plot(kind="bar")
            plt.show()
            print(len(df), plt.get_fignums())
        """)
        self.assertEqual(report, {"exit": 0, "run": 2})
        self.assertEqual(self.outputs_list(), ["figure-1.png", "figure-2.png"])
        self.assert_png("figure-2.png")

        report = loader.run_in_session("print('no plot')")
        self.assertEqual(report, {"exit": 0, "run": 3})
        self.assertEqual(self.outputs_list(), ["figure-1.png", "figure-2.png"])
        self.assertEqual(loader.stdout(), "3 []\nno plot\n")
        self.assertEqual(loader.stderr(), "")

    def test_a_run_that_fails_still_has_its_figures_saved(self):
        loader = self.loader()
        report = loader.run_in_session("""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            1 / 0
        """)
        self.assertEqual(report, {"exit": 1, "run": 1})
        self.assertIn("ZeroDivisionError", loader.stderr())
        self.assert_png("figure-1.png")

    def test_a_figure_that_cannot_be_drawn_is_reported_and_closed(self):
        loader = self.loader()
        report = loader.run_in_session(r"""
            import matplotlib.pyplot as plt
            plt.plot([1, 2])
            plt.title(r"$\notacommand{x}$")
        """)
        self.assertEqual(report, {"exit": 0, "run": 1})
        self.assertIn("Traceback", loader.stderr())
        self.assertNotIn('File "<string>"', loader.stderr())
        report = loader.run_in_session("""
            import matplotlib.pyplot as plt
            print(plt.get_fignums())
        """)
        self.assertEqual(report, {"exit": 0, "run": 2})
        self.assertEqual(loader.stdout(), "[]\n")
        self.assertEqual(self.outputs_list(), [])  # no half-written file

    def test_no_matplotlib_no_backend(self):
        loader = self.loader(modules="numpy")
        report = loader.run_in_session("""
            import sys
            print("sandbox_plots" in sys.modules, "matplotlib" in sys.modules)
        """)
        self.assertEqual(report, {"exit": 0, "run": 1})
        report = loader.run_in_session("import sys; print('matplotlib' in sys.modules)")
        self.assertEqual(loader.stdout(), "False False\nFalse\n")
        self.assertFalse(self.outputs.exists())


class WarmImportTest(LoaderTest):
    PROGRAM = """
        import sys
        print([m in sys.modules for m in ("numpy", "pandas", "matplotlib.pyplot")])
        print([m in globals() for m in ("numpy", "pandas", "matplotlib", "plt", "importlib")])
        print(__name__, sys.argv == [__file__], sys.path[0] == __import__("os").getcwd())
    """

    def test_warm_modules_are_imported_but_not_in_the_programs_globals(self):
        self.assert_clean(self.once(self.PROGRAM),
                          "[True, True, True]\n[False, False, False, False, False]\n"
                          "__main__ True True\n")

    def test_a_waiting_request_stops_the_warm_imports(self):
        # Sent before the interpreter has even started: it imports nothing more.
        loader = self.loader()
        result = loader.run_once(self.PROGRAM, early=True)
        self.assert_clean(result, "[False, False, False]\n"
                                  "[False, False, False, False, False]\n"
                                  "__main__ True True\n")

    def test_without_modules_nothing_is_imported(self):
        for modules in (None, "", " , "):
            with self.subTest(modules=modules):
                self.assert_clean(self.once(self.PROGRAM, modules=modules),
                                  "[False, False, False]\n"
                                  "[False, False, False, False, False]\n"
                                  "__main__ True True\n")

    def test_missing_and_failing_modules_are_skipped_silently(self):
        extra = self.tmp / "extra"
        extra.mkdir()
        (extra / "noisy.py").write_text(textwrap.dedent("""
            import os, sys, warnings
            print("noisy on stdout")
            print("noisy on stderr", file=sys.stderr)
            os.write(1, b"noisy on fd 1\\n")
            os.write(2, b"noisy on fd 2\\n")
            warnings.warn("noisy warning")
        """))
        (extra / "broken.py").write_text("print('broken'); raise RuntimeError('broken')\n")
        (extra / "quitter.py").write_text("raise SystemExit('quitter')\n")
        modules = "nonexistent_mod,noisy,broken,quitter,numpy"
        result = self.once("""
            import sys
            print("mine", [m in sys.modules for m in ("nonexistent_mod", "noisy", "broken", "numpy")])
            print("mine too", file=sys.stderr)
        """, modules=modules, pythonpath=[str(PKGS), str(BACKEND_DIR), str(extra)])
        self.assertEqual(result, (0, "mine [False, True, False, True]\n", "mine too\n"))

    def test_no_file_of_the_home_folder_is_imported_before_the_request(self):
        (self.home / "homemod.py").write_text(
            "open('imported', 'a').write('x')\n")
        self.assert_clean(self.once("""
            import sys
            print("homemod" in sys.modules)
            import homemod
            print(open("imported").read())
        """, modules="homemod,numpy"), "False\nx\n")

    def test_session_keeps_warm_modules(self):
        loader = self.loader()
        self.assertEqual(loader.run_in_session(self.PROGRAM), {"exit": 0, "run": 1})
        self.assertEqual(loader.stdout(), "[True, True, True]\n"
                         "[False, False, False, False, False]\n__main__ True True\n")


class ExitTest(LoaderTest):
    """A one-shot program ends as `python3 main.py` would, without unloading modules."""

    def test_threads_atexit_open_files_and_codes(self):
        program = """
            import atexit, sys, threading, time
            f = open("left-open.txt", "w")
            f.write("flushed at exit")
            atexit.register(lambda: print("atexit ran"))
            def late():
                time.sleep(0.2)
                print("thread done")
            threading.Thread(target=late).start()
            print("main done")
        """
        self.assert_clean(self.once(program), "main done\nthread done\natexit ran\n")
        self.assertEqual((self.home / "left-open.txt").read_text(), "flushed at exit")
        for code, expected in (("sys.exit(3)", 3), ("sys.exit(256)", 0), ("raise SystemExit", 0),
                               ("1/0", 1)):
            with self.subTest(code=code):
                result = self.once(f"import sys\n{code}")
                self.assertEqual(result[0], expected, result)
        code, out, err = self.once("import sys\nsys.exit('bye')")
        self.assertEqual((code, out, err), (1, "", "bye\n"))

    def test_a_closed_stdout_makes_status_120(self):
        code, _, _ = self.once("import os, sys\nprint('x')\nos.close(1)")
        self.assertEqual(code, 120)


class PathsTest(LoaderTest):
    def module_dir(self, name, value):
        folder = self.tmp / f"deps-{name}" / "python"
        folder.mkdir(parents=True)
        (folder / f"{name}.py").write_text(f"VALUE = {value!r}\n")
        return str(folder)

    def test_paths_make_modules_importable_right_after_path_0(self):
        a, b = self.module_dir("mod_a", "a"), self.module_dir("mod_b", "b")
        self.assert_clean(self.once(f"""
            import sys, mod_a, mod_b
            print(mod_a.VALUE, mod_b.VALUE, sys.path[1:3] == [{a!r}, {b!r}])
        """, paths=[a, b, a, 7]), "a b True\n")

    def test_without_paths_nothing_is_added(self):
        self.module_dir("mod_a", "a")
        code, out, err = self.once("""
            try:
                import mod_a
            except ImportError:
                print("not importable")
        """, modules="")
        self.assertEqual((code, out), (0, "not importable\n"))

    def test_a_session_keeps_paths_without_duplicates(self):
        a, b = self.module_dir("mod_a", "a"), self.module_dir("mod_b", "b")
        loader = self.loader()
        self.assertEqual(loader.run_in_session("import mod_a", paths=[a])["exit"], 0)
        self.assertEqual(loader.run_in_session("import mod_b", paths=[a, b])["exit"], 0)
        report = loader.run_in_session(f"""
            import sys, importlib
            import mod_a, mod_b
            print(sys.path.count({a!r}), sys.path.count({b!r}), sys.path[1:3])
        """)
        self.assertEqual(report, {"exit": 0, "run": 3})
        self.assertEqual(loader.stdout(), f"1 1 {[b, a]}\n")
        self.assertEqual(loader.stderr(), "")


if __name__ == "__main__":
    try:
        unittest.main()
    finally:
        shutil.rmtree(MPLCONFIGDIR, ignore_errors=True)

# Pre-started Python: `python3 -c LOADER [MODULES]`. Reads a request line on descriptor 3:
# {"path": ..., "session": ..., "paths": [...]}.
# MODULES (optional, comma-separated) are imported before the request, so that a
# program's `import pandas` costs nothing: silently (the program's output is its own),
# without the working directory on sys.path (no file of the sandbox runs before its
# request), skipping any that is missing or fails, and stopping as soon as a request
# waits (the program then imports what it needs); they are in sys.modules, not in the
# program's globals. "paths" go into sys.path right after sys.path[0] (a session keeps
# them for its later runs).
# One-shot (session false): runs the program as `python3 PATH` would (__main__, sys.argv,
# sys.path[0], tracebacks naming the file), then exits as it would.
# Session: runs each requested program in the one __main__ namespace (globals and
# imports persist, as in a notebook), saves the figures it left open (sandbox_plots,
# if the program loaded it; an error there is printed, the exit code stays), then
# writes {"exit": CODE, "run": N} (N from the request) on descriptor 4 and waits for
# the next request; an uncaught exception or SystemExit ends the run, not the
# interpreter. A request's "tools" numbers the state of the `tools` module the agent
# wrote: when it changed since the last run, the module is forgotten (sys.modules, the
# import system's caches), so that the program's `import tools` reads the new one.
def _sandbox_warm(modules, stop=None):
    # Imports MODULES (comma-separated) silently, skipping any that fails, until
    # stop() says to (a request waiting), then hides what they made from the collector.
    # The loader calls it; so does a template, once (crates/agent/src/template/python/).
    import os, sys
    names = [n.strip() for n in modules.split(",") if n.strip()]
    if not names:
        return
    import importlib
    try:
        saved = [(os.dup(fd), fd) for fd in (1, 2)]
        null = os.open(os.devnull, os.O_WRONLY)
    except OSError:
        return
    for _, fd in saved:
        os.dup2(null, fd)
    os.close(null)
    cwd = sys.path.pop(0) if sys.path[:1] == [""] else None
    # Math libraries loaded here start no thread of their own (they read these when
    # they load; a program's environment is left as it was): a sandbox has half a CPU,
    # and a program that blocks a signal in its one thread must not find another
    # thread, which it never started, taking that signal.
    threads = [k for k in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
               if k not in os.environ]
    for k in threads:
        os.environ[k] = "1"
    try:
        for name in names:
            if stop is not None and stop():
                break
            try:
                importlib.import_module(name)
            except BaseException:
                pass
        _sandbox_warm_plots(stop)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
    finally:
        for k in threads:
            os.environ.pop(k, None)
        if cwd is not None:
            sys.path.insert(0, cwd)
        for copy, fd in saved:
            os.dup2(copy, fd)
            os.close(copy)
    # What the imports made lives as long as the interpreter: out of the collector's
    # sight, so that the program's collections (and the one at its end) walk only
    # the program's own objects.
    import gc
    gc.freeze()


def _sandbox_warm_plots(stop):
    # With pandas and pyplot warm, what a first table and plot load lazily: pandas' text
    # formatting, its plotting backend (looked up through importlib.metadata, then
    # cached by pandas as any program's first plot caches it), matplotlib's Agg canvas
    # and Pillow's image plugins. Modules and that cache only: no figure is made, no
    # pyplot backend chosen (sandbox_plots, which saves the figures left open, is
    # imported only by a program that plots without choosing one) and no font file
    # opened (an open file's offset would be shared by every sandbox forked from here).
    import sys
    if "pandas" not in sys.modules or "matplotlib.pyplot" not in sys.modules:
        return

    def backend():
        from pandas.plotting import _core
        _core._get_plot_backend("matplotlib")

    def pillow():
        from PIL import Image
        Image.preinit()

    def formats():
        import pandas.io.formats.string  # noqa: F401

    def agg():
        import matplotlib.backends.backend_agg  # noqa: F401

    for step in (formats, backend, agg, pillow):
        if stop is not None and stop():
            return
        try:
            step()
        except BaseException:
            pass


def _sandbox_loader():
    import json, os, sys
    import __main__
    from importlib.machinery import SourceFileLoader

    pending = bytearray()
    tools_seen = None

    def request():
        while b"\n" not in pending:
            chunk = os.read(3, 4096)
            if not chunk:
                line, pending[:] = bytes(pending), b""
                return json.loads(line) if line.strip() else None
            pending.extend(chunk)
        line, _, rest = bytes(pending).partition(b"\n")
        pending[:] = rest
        return json.loads(line)

    def forget_tools(job):
        nonlocal tools_seen
        if job.get("tools") != tools_seen:
            tools_seen = job.get("tools")
            sys.modules.pop("tools", None)
            import importlib
            importlib.invalidate_caches()

    def load(job, fresh):
        path = job["path"]
        with open(path, "rb") as f:
            source = f.read()
        sys.argv[:] = [path]
        sys.path[0] = os.path.dirname(path)
        added = []
        for p in job.get("paths") or ():
            if isinstance(p, str) and p not in sys.path and p not in added:
                added.append(p)
        sys.path[1:1] = added
        namespace = __main__.__dict__
        if fresh:
            for name in [n for n in namespace if n not in ("__name__", "__builtins__")]:
                del namespace[name]
        namespace.update(__file__=path, __doc__=None, __package__=None, __spec__=None,
                         __cached__=None, __loader__=SourceFileLoader("__main__", path))
        # A streamed job's output goes out line by line, as on a terminal; a plain
        # job's in blocks, as into any pipe.
        try:
            sys.stdout.reconfigure(line_buffering=bool(job.get("stream")))
        except Exception:
            pass
        return compile(source, path, "exec"), namespace

    def report(e):
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)

    def exit_code(e):
        code = e.code
        if code is None:
            return 0
        if isinstance(code, int):
            return code & 0xFF
        print(code, file=sys.stderr)
        return 1

    def finish(namespace, status):
        # Ends a one-shot program as Python's exit would, as far as a program can see:
        # its other (non-daemon) threads are waited for, atexit handlers run (the plots
        # backend saves open figures there), its globals are dropped and cycles collected
        # (files it left open are flushed and closed) and the standard streams flushed
        # (a failure there makes status 120, as in CPython). What is skipped is the
        # unloading of every module, which with numpy, pandas and matplotlib loaded
        # takes longer than a short program itself.
        import atexit, gc, threading
        try:
            threading._shutdown()
        except BaseException:
            pass
        atexit._run_exitfuncs()
        namespace.clear()
        gc.collect()
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except BaseException:
                status = status or 120
        os._exit(status)

    def request_waiting():
        # A request waiting: the program goes first; it imports what it needs.
        import select
        return bool(select.select([3], [], [], 0)[0])

    _sandbox_warm(sys.argv[1] if len(sys.argv) > 1 else "", request_waiting)
    first = request()
    if not first:
        sys.exit(0)
    if not first.get("session"):
        code, namespace = load(first, True)
        os.close(3)
        os.close(4)
        status = 0
        try:
            exec(code, namespace)
        except SystemExit as e:
            status = exit_code(e)
        except BaseException as e:
            report(e)
            if isinstance(e, KeyboardInterrupt):
                import signal
                sys.stdout.flush()
                signal.signal(signal.SIGINT, signal.SIG_DFL)
                os.kill(os.getpid(), signal.SIGINT)
            status = 1
        finish(namespace, status)

    fresh, job = True, first
    while job:
        status = 0
        try:
            forget_tools(job)
            code, namespace = load(job, fresh)
            fresh = False
            exec(code, namespace)
        except SystemExit as e:
            status = exit_code(e)
        except BaseException as e:
            report(e)
            status = 1
        plots = sys.modules.get("sandbox_plots")
        if plots is not None:
            try:
                plots.flush()
            except BaseException as e:
                report(e)
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except Exception:
                pass
        os.write(4, json.dumps({"exit": status, "run": job.get("run")}).encode() + b"\n")
        job = request()
    sys.exit(0)
_sandbox_loader()

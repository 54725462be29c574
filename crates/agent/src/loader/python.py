# Pre-started Python: waits for the path of the program on descriptor 3, then runs it
# as `python3 PATH` would: __main__, sys.argv, sys.path[0], tracebacks naming the file.
def _sandbox_run():
    import os, sys
    import __main__
    from importlib.machinery import SourceFileLoader
    chunks = []
    while True:
        chunk = os.read(3, 4096)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(3)
    path = b"".join(chunks).decode()
    if not path:
        sys.exit(0)
    with open(path, "rb") as f:
        source = f.read()
    sys.argv[:] = [path]
    sys.path[0] = os.path.dirname(path)
    namespace = __main__.__dict__
    for name in [n for n in namespace if n not in ("__name__", "__builtins__")]:
        del namespace[name]
    namespace.update(__file__=path, __doc__=None, __package__=None, __spec__=None,
                     __cached__=None, __loader__=SourceFileLoader("__main__", path))
    try:
        exec(compile(source, path, "exec"), namespace)
    except SystemExit:
        raise
    except BaseException as e:
        tb = e.__traceback__
        while tb is not None and tb.tb_frame.f_code.co_filename == "<string>":
            tb = tb.tb_next
        sys.excepthook(type(e), e.with_traceback(tb), tb)
        if isinstance(e, KeyboardInterrupt):
            import signal
            sys.stdout.flush()
            signal.signal(signal.SIGINT, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGINT)
        sys.exit(1)
_sandbox_run()

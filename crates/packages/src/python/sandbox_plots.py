"""Matplotlib backend of the sandboxes: plots come back as PNG images, as in a notebook.

Selected by ``MPLBACKEND=module://sandbox_plots``, which the agent sets for every program
when the package set holds this file. Figures are drawn with Agg; what a notebook would
show is written as ``figure-N.png`` into the outputs folder (``/home/sandbox/outputs``,
made if missing), whose files the run hands back:

- ``plt.show()`` saves every open figure, then closes them all;
- figures still open when a program ends are saved the same way: at exit for a one-shot
  program, and after each run in a session (the loader calls :func:`flush`).

N is the next number whose file does not exist yet: nothing is ever overwritten.

Notebook behaviour, on purpose: what is saved is every figure still open at ``show()`` or
at the end, whatever the program did with it before. So ``plt.savefig("outputs/x.png")``
then ``plt.close()`` gives x.png alone, but a figure saved with ``savefig`` and left open
is also saved as ``figure-N.png`` (a notebook shows it too). Empty figures (nothing on
them: no axes, lines, text...) are skipped, as IPython skips them. ``fig.show()`` does
nothing here (Agg is not interactive, and without a display matplotlib says nothing);
the figure is saved with the others. Each file is rendered at the figure's own dpi (100 unless the program
set it).

``SANDBOX_OUTPUTS_DIR`` moves the outputs folder; only tests set it.
"""

import atexit
import os

# Imported first so that our exit handler, registered after pyplot's (which closes every
# figure), runs before it.
from matplotlib._pylab_helpers import Gcf
from matplotlib.backend_bases import FigureManagerBase
from matplotlib.backends.backend_agg import FigureCanvasAgg

FigureCanvas = FigureCanvasAgg
FigureManager = FigureManagerBase

# The lowest number that may still be free; the folder is checked for each file.
_next = 1


def _folder():
    return os.environ.get("SANDBOX_OUTPUTS_DIR", "/home/sandbox/outputs")


def _save(figure):
    """Writes `figure` to the next free figure-N.png; never replaces a file."""
    global _next
    folder = _folder()
    os.makedirs(folder, exist_ok=True)
    while True:
        path = os.path.join(folder, "figure-%d.png" % _next)
        _next += 1
        try:
            file = open(path, "xb")
        except FileExistsError:
            continue
        try:
            with file:
                figure.savefig(file, format="png", dpi="figure")
        except BaseException:
            os.unlink(path)  # no half-written image
            raise
        return path


def _empty(figure):
    """Whether nothing was put on `figure` (IPython shows no image for it either)."""
    parts = (figure.axes, figure.subfigs, figure.lines, figure.images, figure.texts,
             figure.patches, figure.artists)
    return not any(parts)


def flush():
    """Saves every open figure, by figure number, and closes them all.

    Every figure is closed even when saving one fails (else it would fail again at
    every later flush); the first error is raised once all are closed.
    """
    error = None
    for manager in sorted(Gcf.get_all_fig_managers(), key=lambda m: m.num):
        figure = manager.canvas.figure
        try:
            if not _empty(figure):
                _save(figure)
        except Exception as e:
            if error is None:
                error = e
        finally:
            Gcf.destroy(manager)
    if error is not None:
        raise error


def show(*args, **kwargs):
    """``plt.show()``: every open figure becomes an image and is closed."""
    flush()


atexit.register(flush)

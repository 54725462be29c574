"""The tools this run may call, by server: `tools.<server>.<tool>(**arguments)`.

Written by the sandbox's agent for this run from the tools its caller offers. Each
function sends one call to the agent's socket and waits for its answer: it returns the
tool's result (its structured content when it has some, else its text) and raises
`tools.ToolError` when the call fails (the tool's error, or a refusal: a tool not
offered, the run's budget of calls spent, the run ending). `tools.list()` lists the
servers and their tools. Calls may be made from several threads at once.
"""

import inspect as _inspect
import json as _json
import socket as _socket

__all__ = ["ToolError"]


class ToolError(Exception):
    """A call that failed: the tool's error, or the sandbox's refusal, as its text."""


def _call(server, tool, arguments):
    line = _json.dumps({"server": server, "tool": tool, "arguments": arguments})
    with _socket.socket(_socket.AF_UNIX, _socket.SOCK_STREAM) as conn:
        try:
            conn.connect(_SOCKET)
        except OSError as e:
            raise ToolError(f"tools: the call could not be made ({e.strerror})") from None
        conn.sendall(line.encode() + b"\n")
        answer = bytearray()
        while not answer.endswith(b"\n"):
            chunk = conn.recv(1 << 16)
            if not chunk:
                break
            answer += chunk
    if not answer.endswith(b"\n"):
        raise ToolError("tools: the call got no answer (the run is ending)")
    answer = _json.loads(answer)
    if answer.get("error") is not None:
        raise ToolError(answer["error"])
    return answer.get("result")


_TYPES = {"string": str, "integer": int, "number": float, "boolean": bool,
          "array": list, "object": dict}


def _signature(parameters):
    # Keyword-only parameters, for those whose names Python takes as one (the others
    # are still passed in a dict).
    import keyword
    shown = []
    for name, kind, required in parameters:
        if not name.isidentifier() or keyword.iskeyword(name):
            continue
        default = _inspect.Parameter.empty if required else None
        annotation = _TYPES.get(kind, _inspect.Parameter.empty)
        shown.append(_inspect.Parameter(name, _inspect.Parameter.KEYWORD_ONLY,
                                        default=default, annotation=annotation))
    return _inspect.Signature(shown)


def _function(server, tool, name, description, doc, parameters):
    def call(*args, **kwargs):
        if args:
            if len(args) != 1 or kwargs or not isinstance(args[0], dict):
                raise TypeError(f"{name}() takes keyword arguments, or one dict of them")
            return _call(server, tool, dict(args[0]))
        return _call(server, tool, kwargs)

    call.__name__ = call.__qualname__ = name
    call.__module__ = __name__
    call.__doc__ = doc
    call.__signature__ = _signature(parameters)
    call.tool = tool
    call.description = description
    return call


class _Server:
    """The tools of one server, each a function."""

    def __init__(self, name, functions):
        self.__name__ = name
        self._functions = functions
        for function in functions:
            setattr(self, function.__name__, function)

    def __repr__(self):
        names = ", ".join(f.__name__ for f in self._functions)
        return f"<tools.{self.__name__}: {names}>"


def _listing(servers):
    def listing():
        """The servers and their tools: a list of {"server": name, "tools": [{"name":
        the tool's name, "function": its function's, "description": ...}]}."""
        return [{"server": s.__name__,
                 "tools": [{"name": f.tool, "function": f.__name__,
                            "description": f.description}
                           for f in s._functions]}
                for s in servers]

    listing.__name__ = listing.__qualname__ = "list"
    listing.__module__ = __name__
    return listing

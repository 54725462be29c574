"""The checks of the rootless guest test, run as the ordinary user alice.

`check.py delegated`: in a cgroup v2 delegated to alice, `sandbox-mcp stdio --embedded`
runs programs whose sandboxes have their memory and CPU limits.
`check.py plain`: in a cgroup that is not hers, it refuses with the ways out, and runs
without limits only under the named opt-out.

Each check prints `ROOTLESS-CHECK <name> ok` or `ROOTLESS-CHECK <name> FAIL <why>`.
"""
import json
import os
import subprocess
import sys

MCP = "/opt/t/sandbox-mcp"
NO_LIMITS = "NO memory or CPU limit"
MIB = 1024 * 1024
# Filling 256 MiB under TCG on a busy host can outlast the default timeout.
SLOW_TIMEOUT_MS = 120_000


def check(name, ok, detail=""):
    verdict = "ok" if ok else "FAIL " + " ".join(str(detail).split())[:600]
    print(f"ROOTLESS-CHECK {name} {verdict}", flush=True)


class Server:
    """`sandbox-mcp stdio --embedded`, spoken to in newline-delimited JSON-RPC."""

    def __init__(self, env):
        self.proc = subprocess.Popen(
            [MCP, "stdio", "--embedded"],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=env,
        )
        self.next_id = 1

    def send(self, message):
        self.proc.stdin.write((json.dumps(message) + "\n").encode())
        self.proc.stdin.flush()

    def request(self, method, params):
        request_id = self.next_id
        self.next_id += 1
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        while True:
            line = self.proc.stdout.readline()
            if not line:
                raise RuntimeError("the server ended: " + self.stop())
            message = json.loads(line)
            if message.get("id") == request_id:
                if "error" in message:
                    raise RuntimeError(json.dumps(message["error"]))
                return message["result"]

    def initialize(self):
        self.request(
            "initialize",
            {
                "protocolVersion": "2025-06-18",
                "capabilities": {},
                "clientInfo": {"name": "rootless-guest", "version": "1"},
            },
        )
        self.send({"jsonrpc": "2.0", "method": "notifications/initialized"})

    def descriptions(self):
        return [tool.get("description", "") for tool in self.request("tools/list", {})["tools"]]

    def call(self, tool, code, timeout_ms=None):
        arguments = {"code": code}
        if timeout_ms is not None:
            arguments["timeoutMs"] = timeout_ms
        result = self.request("tools/call", {"name": tool, "arguments": arguments})
        text = "".join(c.get("text", "") for c in result.get("content", []))
        return text, result.get("structuredContent") or {}

    def stop(self):
        """Closes the session (end of input) and returns what the server said on stderr."""
        try:
            _, err = self.proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            _, err = self.proc.communicate()
        return err.decode(errors="replace")


def base_env(**extra):
    return dict(os.environ, RUST_LOG="warn", **extra)


def sandbox_cgroups(root):
    """The sandbox cgroups below `root`, with their memory.max and cpu.max."""
    found = []
    for dirpath, dirnames, _ in os.walk(root):
        if os.path.basename(dirpath).startswith("sb"):
            with open(os.path.join(dirpath, "memory.max")) as f:
                memory = f.read().strip()
            with open(os.path.join(dirpath, "cpu.max")) as f:
                cpu = f.read().strip()
            found.append((dirpath, memory, cpu))
    return found


def hello_and_tools(server, hello, tools, limited):
    """A first program runs; every tool says the sandboxes are `limited`, or not."""
    server.initialize()
    text, _ = server.call("run_python", "print('hello', 6 * 7)")
    check(hello, "hello 42" in text, text)
    descriptions = server.descriptions()
    said = [NO_LIMITS not in d for d in descriptions]
    check(tools, descriptions and all(s == limited for s in said), descriptions)


def delegated():
    server = Server(base_env())
    try:
        hello_and_tools(server, "delegated-hello", "delegated-tools-say-limits", True)

        with open(f"/proc/{server.proc.pid}/cgroup") as f:
            own = f.read().strip()
        check("delegated-runner-in-leaf", own == "0::/alice/supervisor", own)

        cgroups = sandbox_cgroups("/sys/fs/cgroup/alice")
        check(
            "delegated-sandbox-cgroups",
            cgroups
            and all(m == str(256 * MIB) and c == "50000 100000" for _, m, c in cgroups),
            cgroups,
        )

        text, structured = server.call(
            "run_python",
            "b = bytearray(400 * 1024 * 1024)\nfor i in range(0, len(b), 4096): b[i] = 1\nprint('survived')",
            SLOW_TIMEOUT_MS,
        )
        check(
            "delegated-memory-limit",
            structured.get("oomKilled") is True and "survived" not in text,
            text,
        )

        # Inside, the sandbox user; outside, alice's subordinate ids, never hers.
        text, structured = server.call("run_bash", "id -u; cat /proc/self/uid_map")
        lines = structured.get("stdout", "").splitlines()
        maps = [line.split() for line in lines[1:] if line.strip()]
        check(
            "delegated-subordinate-ids",
            lines[:1] == ["1000"]
            and maps
            and all(int(fields[1]) >= 100000 for fields in maps),
            text,
        )

        # A hostile program: its cgroup is its own root, and no cgroup file system can
        # be reached or mounted to leave it (alice's files are not its ids' either).
        _, structured = server.call(
            "run_bash",
            "cat /proc/self/cgroup; ls /sys/fs/cgroup 2>&1 | head -1\n"
            "mkdir -p /tmp/cg && mount -t cgroup2 none /tmp/cg 2>&1; echo mount=$?\n"
            "echo $$ > /proc/1/root/sys/fs/cgroup/cgroup.procs 2>&1; echo move=$?",
        )
        out = structured.get("stdout", "")
        check(
            "delegated-sandbox-cannot-leave-its-cgroup",
            out.startswith("0::/\n") and "mount=0" not in out and "move=0" not in out,
            out,
        )
    except Exception as e:  # one line per failure, never a silent end
        check("delegated-session", False, repr(e))
    finally:
        server.stop()
    check("delegated-cleanup", not sandbox_cgroups("/sys/fs/cgroup/alice"), "sandbox cgroups left")


def plain():
    server = Server(base_env())
    try:
        _, err = server.proc.communicate(timeout=60)
        err = err.decode(errors="replace")
        code = server.proc.returncode
    except subprocess.TimeoutExpired:
        server.proc.kill()
        err, code = "still running after 60 s", None
    check(
        "plain-refuses-with-the-ways-out",
        code not in (0, None) and "not delegated" in err and "Delegate=yes" in err,
        f"exit {code}: {err}",
    )

    server = Server(base_env(RUNNER_UNSAFE_NO_RESOURCE_LIMITS="true"))
    try:
        hello_and_tools(server, "plain-opt-out-runs", "plain-opt-out-says-so", False)
    except Exception as e:
        check("plain-opt-out-session", False, repr(e))
    finally:
        server.stop()


if __name__ == "__main__":
    {"delegated": delegated, "plain": plain}[sys.argv[1]]()

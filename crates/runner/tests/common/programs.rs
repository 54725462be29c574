//! Programs in every built-in language, shared by the language tests of both backends
//! (languages.rs on the process backend, tests/vm/ in a guest): the same hello, broken,
//! endless and memory-hungry program wherever a language is tested.

/// The eight built-in languages.
pub const LANGUAGES: [&str; 8] = [
    "bash",
    "python",
    "node",
    "typescript",
    "c",
    "cpp",
    "go",
    "java",
];

/// The compiled ones (by a command or by their loader).
pub const COMPILED: [&str; 5] = ["typescript", "c", "cpp", "go", "java"];

/// A program in `lang` that prints `hello <lang>`, reads its whole stdin and prints how
/// many bytes came (0: the stdin is empty, never a terminal or a hang), then exits 3.
pub fn hello(lang: &str) -> &'static str {
    match lang {
        "bash" => "echo hello bash; echo $(cat | wc -c); exit 3",
        "python" => "import sys\nprint('hello python')\nprint(len(sys.stdin.read()))\nsys.exit(3)",
        "node" => {
            "console.log('hello node');\n\
             console.log(require('fs').readFileSync(0).length);\nprocess.exit(3);"
        }
        "typescript" => {
            "const greeting: string = 'hello typescript';\nconsole.log(greeting);\n\
             const input: Buffer = require('fs').readFileSync(0);\n\
             console.log(input.length);\nprocess.exit(3);"
        }
        "c" => {
            "#include <stdio.h>\nint main(void) {\n  puts(\"hello c\");\n  int n = 0;\n  \
             while (getchar() != EOF) n++;\n  printf(\"%d\\n\", n);\n  return 3;\n}\n"
        }
        "cpp" => {
            "#include <iostream>\n#include <string>\nint main() {\n  \
             std::cout << \"hello cpp\" << std::endl;\n  std::string all, line;\n  \
             while (std::getline(std::cin, line)) all += line;\n  \
             std::cout << all.size() << std::endl;\n  return 3;\n}\n"
        }
        "go" => {
            "package main\n\nimport (\n\t\"fmt\"\n\t\"io\"\n\t\"os\"\n)\n\nfunc main() {\n\t\
             fmt.Println(\"hello go\")\n\tdata, _ := io.ReadAll(os.Stdin)\n\t\
             fmt.Println(len(data))\n\tos.Exit(3)\n}\n"
        }
        "java" => {
            "public class Main {\n  public static void main(String[] args) throws Exception {\n    \
             System.out.println(\"hello java\");\n    \
             System.out.println(System.in.readAllBytes().length);\n    System.exit(3);\n  }\n}\n"
        }
        other => panic!("no hello for {other}"),
    }
}

/// A program of `lang` that does not compile.
pub fn broken(lang: &str) -> &'static str {
    match lang {
        "typescript" => "const x: number = ;\n",
        "c" => "int main(void) { return undeclared; }\n",
        "cpp" => "int main() { std::vector<int> v; }\n",
        "go" => "package main\n\nfunc main() { x := 1 }\n",
        "java" => "public class Main { public static void main(String[] a) { int x = \"s\"; } }\n",
        other => panic!("no broken program for {other}"),
    }
}

/// A program of `lang` that never ends.
pub fn forever(lang: &str) -> &'static str {
    match lang {
        "bash" => "while :; do :; done",
        "python" => "while True: pass",
        "node" => "for (;;) {}",
        "typescript" => "let n: number = 0;\nfor (;;) { n++; }",
        "c" => "int main(void) { for (;;) {} }\n",
        "cpp" => "int main() { volatile int n = 0; for (;;) { n++; } }\n",
        "go" => "package main\n\nfunc main() {\n\tfor {\n\t}\n}\n",
        "java" => "class Main { public static void main(String[] a) { for (;;) {} } }\n",
        other => panic!("no endless program for {other}"),
    }
}

/// A program of `lang` that touches 600 MiB (bash: ever more), over every sandbox's 256 MiB.
pub fn hog(lang: &str) -> &'static str {
    match lang {
        // tail keeps the whole last "line" of /dev/zero, which never ends.
        "bash" => "tail /dev/zero",
        "python" => "b = bytearray(600 << 20)\nprint(len(b))",
        "node" => "const b = Buffer.alloc(600 << 20, 1); console.log(b.length);",
        "typescript" => "const b: Buffer = Buffer.alloc(600 << 20, 1);\nconsole.log(b.length);",
        "c" => {
            "#include <stdlib.h>\n#include <stdio.h>\nint main(void) {\n  \
             size_t n = (size_t)600 << 20;\n  volatile char *p = malloc(n);\n  \
             if (!p) return 2;\n  for (size_t i = 0; i < n; i += 4096) p[i] = 1;\n  \
             long sum = 0;\n  for (size_t i = 0; i < n; i += 4096) sum += p[i];\n  \
             printf(\"%ld\\n\", sum);\n  return 0;\n}\n"
        }
        "cpp" => {
            "#include <cstdio>\nint main() {\n  size_t n = (size_t)600 << 20;\n  \
             volatile char *p = new char[n];\n  \
             for (size_t i = 0; i < n; i += 4096) p[i] = 1;\n  \
             std::printf(\"%d\\n\", (int)p[n - 4096]);\n}\n"
        }
        "go" => {
            "package main\n\nimport \"fmt\"\n\nfunc main() {\n\tb := make([]byte, 600<<20)\n\t\
             for i := range b {\n\t\tb[i] = 1\n\t}\n\tfmt.Println(len(b))\n}\n"
        }
        "java" => {
            "class Main { public static void main(String[] a) {\n  \
             byte[][] b = new byte[60][];\n  \
             for (int i = 0; i < 60; i++) { b[i] = new byte[10 << 20]; b[i][0] = 1; }\n  \
             System.out.println(b.length);\n} }\n"
        }
        other => panic!("no hog for {other}"),
    }
}

/// Python that arms a POSIX timer whose signal is SIGCONT (every 20 ms), which wakes a
/// stopped process by being sent, and counts the timer's ticks in `/tmp/ticks`.
pub const TICKER: &str = r#"
import ctypes, os, signal
libc = ctypes.CDLL(None, use_errno=True)
class sigevent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int),
                ("notify", ctypes.c_int), ("pad", ctypes.c_int * 12)]
class timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
class itimerspec(ctypes.Structure):
    _fields_ = [("interval", timespec), ("value", timespec)]
ticks = 0
def tick(signum, frame):
    global ticks
    ticks += 1
    with open("/tmp/ticks.new", "w") as f:
        f.write(str(ticks))
    os.replace("/tmp/ticks.new", "/tmp/ticks")
signal.signal(signal.SIGCONT, tick)
event = sigevent(None, signal.SIGCONT, 0)  # SIGEV_SIGNAL
timer = ctypes.c_void_p()
assert libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) == 0  # CLOCK_MONOTONIC
every = timespec(0, 20_000_000)
assert libc.timer_settime(timer, 0, ctypes.byref(itimerspec(every, every)), None) == 0
while True:
    signal.pause()
"#;

/// Python that forks a busy shell loop and spins itself, waking both with SIGCONT: its
/// loop signals the partner, and a POSIX timer whose signal is SIGCONT wakes itself.
/// The timer is one-shot, pushed 50 ms ahead on every turn of the loop, so that it
/// fires only once the process stops: a stop flushes a pending SIGCONT, and before
/// Linux 6.13 an interval timer whose signal was flushed is never re-armed (it is
/// re-armed when its signal is taken), so a timer that fires while the process runs may
/// die with the next stop. Once both run, `/tmp/pair-started` holds their pids.
pub const BUSY_PAIR: &str = r#"
import ctypes, os, signal, sys
partner = os.fork()
if partner == 0:
    os.execvp("sh", ["sh", "-c", "while :; do :; done", sys.argv[1] + "-b"])
libc = ctypes.CDLL(None, use_errno=True)
class sigevent(ctypes.Structure):
    _fields_ = [("value", ctypes.c_void_p), ("signo", ctypes.c_int),
                ("notify", ctypes.c_int), ("pad", ctypes.c_int * 12)]
class timespec(ctypes.Structure):
    _fields_ = [("sec", ctypes.c_long), ("nsec", ctypes.c_long)]
class itimerspec(ctypes.Structure):
    _fields_ = [("interval", timespec), ("value", timespec)]
signal.signal(signal.SIGCONT, lambda s, f: os.kill(partner, signal.SIGCONT))
event = sigevent(None, signal.SIGCONT, 0)
timer = ctypes.c_void_p()
assert libc.timer_create(1, ctypes.byref(event), ctypes.byref(timer)) == 0
ahead = ctypes.byref(itimerspec(timespec(0, 0), timespec(0, 50_000_000)))
open("/tmp/pair-started", "w").write(f"{os.getpid()} {partner}")
while True:
    libc.timer_settime(timer, 0, ahead, None)
    os.kill(partner, signal.SIGCONT)
"#;

/// Bash that writes `program` to `/tmp/<name>.py` and starts it in the background with
/// `marker` on its command line, its output nowhere.
pub fn start_in_background(name: &str, program: &str, marker: &str) -> String {
    format!(
        "cat > /tmp/{name}.py <<'PROGRAM'\n{program}\nPROGRAM\n\
         python3 /tmp/{name}.py {marker} </dev/null >/dev/null 2>&1 &\n"
    )
}

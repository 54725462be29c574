//! Programs in every language of Debian's toolchains (`debian.toml`), for
//! languages_debian.rs: the same four programs as the built-in languages'
//! (programs.rs): hello, broken, endless and memory-hungry.

/// One language's programs.
pub struct Programs {
    /// Its row's name.
    pub lang: &'static str,
    /// Prints `hello <lang>`, then the byte count of its stdin (`0`), then exits with
    /// [`Programs::exit`].
    pub hello: &'static str,
    /// The exit code of `hello`: 3, where the language can choose one.
    pub exit: i64,
    /// A program that does not compile (compiled languages only).
    pub broken: Option<&'static str>,
    /// A program that never ends.
    pub forever: &'static str,
    /// A program that allocates ever more, or far past the sandbox's memory.
    pub hog: &'static str,
}

/// Every row of `debian.toml`, in its order.
pub const DEBIAN: &[Programs] = &[
    Programs {
        lang: "rust",
        hello: "use std::io::Read;\nfn main() {\n    println!(\"hello rust\");\n    \
                let mut s = String::new();\n    std::io::stdin().read_to_string(&mut s).unwrap();\n    \
                println!(\"{}\", s.len());\n    std::process::exit(3);\n}\n",
        exit: 3,
        broken: Some("fn main() { let x: i32 = \"s\"; }\n"),
        forever: "fn main() { loop {} }\n",
        hog: "fn main() {\n    let mut v: Vec<Vec<u8>> = Vec::new();\n    \
              loop { v.push(vec![1u8; 10 << 20]); }\n}\n",
    },
    Programs {
        lang: "ruby",
        hello: "puts 'hello ruby'\nputs STDIN.read.bytesize\nexit 3\n",
        exit: 3,
        broken: None,
        forever: "loop {}\n",
        hog: "a = []\nloop { a << 'x' * (10 << 20) }\n",
    },
    Programs {
        lang: "php",
        hello: "<?php\necho \"hello php\\n\";\necho strlen(stream_get_contents(STDIN)), \"\\n\";\nexit(3);\n",
        exit: 3,
        broken: None,
        forever: "<?php\nfor (;;) {}\n",
        hog: "<?php\n$a = [];\nfor (;;) { $a[] = str_repeat('x', 10 << 20); }\n",
    },
    Programs {
        lang: "perl",
        hello: "print \"hello perl\\n\";\nlocal $/;\nmy $in = <STDIN>;\n\
                print length($in // ''), \"\\n\";\nexit 3;\n",
        exit: 3,
        broken: None,
        forever: "1 while 1;\n",
        hog: "my @a;\npush @a, 'x' x (10 << 20) while 1;\n",
    },
    Programs {
        lang: "lua",
        hello: "print('hello lua')\nlocal s = io.read('a')\nprint(#s)\nos.exit(3)\n",
        exit: 3,
        broken: None,
        forever: "while true do end\n",
        hog: "local t = {}\nlocal i = 0\nwhile true do\n  i = i + 1\n  \
              t[i] = string.rep('x', 10 * 1024 * 1024) .. i\nend\n",
    },
    Programs {
        lang: "r",
        hello: "cat('hello r\\n')\nx <- readLines(file('stdin'))\n\
                cat(sum(nchar(x)), '\\n', sep = '')\nquit(status = 3)\n",
        exit: 3,
        broken: None,
        forever: "repeat {}\n",
        hog: "l <- list()\ni <- 0\nrepeat {\n  i <- i + 1\n  l[[i]] <- numeric(5e6) + i\n}\n",
    },
    Programs {
        lang: "csharp",
        hello: "using System;\nclass Program {\n  static int Main() {\n    \
                Console.WriteLine(\"hello csharp\");\n    \
                Console.WriteLine(Console.In.ReadToEnd().Length);\n    return 3;\n  }\n}\n",
        exit: 3,
        broken: Some("class P { static void Main() { int x = \"s\"; } }\n"),
        forever: "class P { static void Main() { for (;;) {} } }\n",
        hog: "using System.Collections.Generic;\nclass P {\n  static void Main() {\n    \
              var l = new List<byte[]>();\n    for (;;) {\n      var b = new byte[10 << 20];\n      \
              for (int i = 0; i < b.Length; i += 4096) b[i] = 1;\n      l.Add(b);\n    }\n  }\n}\n",
    },
    Programs {
        lang: "haskell",
        hello: "import System.Exit\nmain :: IO ()\nmain = do\n  putStrLn \"hello haskell\"\n  \
                s <- getContents\n  print (length s)\n  exitWith (ExitFailure 3)\n",
        exit: 3,
        broken: Some("main = putStrLn (1 + \"x\")\n"),
        forever: "main :: IO ()\nmain = go 0\n  where\n    go :: Int -> IO ()\n    go n = go (n + 1)\n",
        hog: "main :: IO ()\nmain = do\n  let xs = [1 ..] :: [Integer]\n  print (length xs + fromIntegral (sum xs))\n",
    },
    Programs {
        lang: "ocaml",
        hello: "let () =\n  print_endline \"hello ocaml\";\n  let n = ref 0 in\n  \
                (try while true do ignore (input_char stdin); incr n done with End_of_file -> ());\n  \
                Printf.printf \"%d\\n\" !n;\n  exit 3\n",
        exit: 3,
        broken: Some("let () = print_int \"x\"\n"),
        forever: "let rec f () = f ()\nlet () = f ()\n",
        hog: "let () =\n  let l = ref [] in\n  while true do l := Bytes.make (10 lsl 20) 'x' :: !l done\n",
    },
    Programs {
        lang: "erlang",
        // An escript without a module line; the others have one.
        hello: "main(_) ->\n    io:format(\"hello erlang~n\"),\n    \
                io:format(\"~p~n\", [byte_size(read_all(<<>>))]),\n    halt(3).\n\n\
                read_all(Acc) ->\n    case file:read(standard_io, 65536) of\n        \
                {ok, D} -> read_all(<<Acc/binary, (iolist_to_binary(D))/binary>>);\n        \
                eof -> Acc\n    end.\n",
        exit: 3,
        broken: Some("-module(main).\n-export([main/1]).\nmain(_) -> x = .\n"),
        forever: "-module(main).\n-export([main/1]).\nmain(_) -> loop().\nloop() -> loop().\n",
        hog: "-module(main).\n-export([main/1]).\nmain(_) -> hog([]).\nhog(L) -> hog([binary:copy(<<1>>, 10485760) | L]).\n",
    },
    Programs {
        lang: "elixir",
        hello: "IO.puts(\"hello elixir\")\n\
                data = case IO.read(:stdio, :eof) do\n  :eof -> \"\"\n  d -> d\nend\n\
                IO.puts(byte_size(data))\nSystem.halt(3)\n",
        exit: 3,
        broken: None,
        forever: "defmodule L do\n  def loop, do: loop()\nend\nL.loop()\n",
        hog: "defmodule H do\n  def hog(l), do: hog([:binary.copy(<<1>>, 10485760) | l])\nend\nH.hog([])\n",
    },
    Programs {
        lang: "fortran",
        hello: "program main\n  implicit none\n  integer :: n, ios\n  character :: c\n  \
                print '(a)', 'hello fortran'\n  n = 0\n  do\n    \
                read(*, '(a)', advance='no', iostat=ios) c\n    if (ios /= 0) exit\n    \
                n = n + 1\n  end do\n  print '(i0)', n\n  call exit(3)\nend program main\n",
        exit: 3,
        broken: Some("program main\n  x = \nend program main\n"),
        forever: "program main\n  do\n  end do\nend program main\n",
        hog: "program main\n  integer(8) :: i\n  real(8), allocatable :: a(:)\n  \
              allocate(a(200000000_8))\n  do i = 1, size(a, kind=8), 512\n    a(i) = 1.0\n  \
              end do\n  print *, sum(a(1:10))\nend program main\n",
    },
    Programs {
        lang: "pascal",
        hello: "program main;\nvar c: char; n: integer;\nbegin\n  writeln('hello pascal');\n  \
                n := 0;\n  while not eof(input) do begin read(c); n := n + 1; end;\n  \
                writeln(n);\n  halt(3);\nend.\n",
        exit: 3,
        broken: Some("program main;\nbegin\n  x := 1;\nend.\n"),
        forever: "program main;\nbegin\n  while true do ;\nend.\n",
        hog: "program main;\nvar p: PByte; i, n: PtrUInt;\nbegin\n  n := 600 * 1024 * 1024;\n  \
              p := GetMem(n);\n  i := 0;\n  while i < n do begin p[i] := 1; i := i + 4096; end;\n  \
              writeln(p[0]);\nend.\n",
    },
    Programs {
        lang: "d",
        hello: "import std.stdio;\nint main() {\n    writeln(\"hello d\");\n    size_t n = 0;\n    \
                foreach (ubyte[] chunk; stdin.byChunk(4096)) n += chunk.length;\n    \
                writeln(n);\n    return 3;\n}\n",
        exit: 3,
        broken: Some("void main() { int x = \"s\"; }\n"),
        forever: "void main() { for (;;) {} }\n",
        hog: "void main() {\n    ubyte[][] l;\n    for (;;) {\n        auto b = new ubyte[10 << 20];\n        \
              b[] = 1;\n        l ~= b;\n    }\n}\n",
    },
    Programs {
        lang: "nim",
        hello: "echo \"hello nim\"\nlet s = stdin.readAll()\necho s.len\nquit(3)\n",
        exit: 3,
        broken: Some("let x: int = \"s\"\n"),
        forever: "while true: discard\n",
        hog: "var l: seq[string]\nwhile true:\n  var s = newString(10 shl 20)\n  \
              for i in countup(0, s.len - 1, 4096): s[i] = 'x'\n  l.add(s)\n",
    },
    Programs {
        lang: "crystal",
        hello: "puts \"hello crystal\"\nputs STDIN.gets_to_end.bytesize\nexit 3\n",
        exit: 3,
        broken: Some("x : Int32 = \"s\"\n"),
        forever: "loop { }\n",
        hog: "a = [] of Bytes\nloop { a << Bytes.new(10 << 20, 1_u8) }\n",
    },
    Programs {
        lang: "clojure",
        hello: "(println \"hello clojure\")\n(println (count (slurp *in*)))\n(System/exit 3)\n",
        exit: 3,
        broken: None,
        forever: "(loop [] (recur))\n",
        hog: "(def a (java.util.ArrayList.))\n\
              (loop [] (.add a (byte-array (* 10 1024 1024) (byte 1))) (recur))\n",
    },
    Programs {
        lang: "groovy",
        hello: "println 'hello groovy'\nprintln System.in.bytes.length\nSystem.exit(3)\n",
        exit: 3,
        broken: Some("println 'never'\ndef x = (1 +\n"),
        forever: "while (true) {}\n",
        hog: "def l = []\nwhile (true) { l << new byte[10 << 20] }\n",
    },
    Programs {
        lang: "kotlin",
        hello: "fun main() {\n    println(\"hello kotlin\")\n    \
                println(System.`in`.readBytes().size)\n    kotlin.system.exitProcess(3)\n}\n",
        exit: 3,
        broken: Some("fun main() { val x: Int = \"s\" }\n"),
        forever: "fun main() { while (true) {} }\n",
        hog: "fun main() {\n    val l = ArrayList<ByteArray>()\n    \
              while (true) l.add(ByteArray(10 shl 20) { 1 })\n}\n",
    },
    Programs {
        lang: "racket",
        hello: "#lang racket/base\n(displayln \"hello racket\")\n\
                (define b (read-bytes 1000000))\n\
                (displayln (if (eof-object? b) 0 (bytes-length b)))\n(exit 3)\n",
        exit: 3,
        broken: None,
        // Without a #lang line: loaded by racket -f.
        forever: "(let loop () (loop))\n",
        hog: "#lang racket/base\n(let loop ([l '()]) (loop (cons (make-bytes (* 10 1024 1024) 1) l)))\n",
    },
    Programs {
        lang: "scheme",
        hello: "(use-modules (ice-9 textual-ports))\n(display \"hello scheme\")\n(newline)\n\
                (let ((s (get-string-all (current-input-port))))\n  \
                (display (if (eof-object? s) 0 (string-length s))))\n(newline)\n(exit 3)\n",
        exit: 3,
        broken: None,
        forever: "(let loop () (loop))\n",
        hog: "(use-modules (rnrs bytevectors))\n(let loop ((l '())) (loop (cons (make-bytevector (* 10 1024 1024) 1) l)))\n",
    },
    Programs {
        lang: "tcl",
        hello: "puts \"hello tcl\"\nputs [string length [read stdin]]\nexit 3\n",
        exit: 3,
        broken: None,
        forever: "while 1 {}\n",
        hog: "set l {}\nwhile 1 { lappend l [string repeat x 10485760] }\n",
    },
    Programs {
        lang: "sql",
        hello: "SELECT 'hello sql';\nSELECT length(coalesce(readfile('/dev/stdin'), ''));\n.exit 3\n",
        exit: 3,
        broken: None,
        forever: "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c)\n\
                  SELECT count(*) FROM c;\n",
        hog: "SELECT length(randomblob(600000000));\n",
    },
    Programs {
        lang: "prolog",
        hello: ":- initialization(main, main).\nmain :-\n    writeln('hello prolog'),\n    \
                read_string(user_input, _, S),\n    string_length(S, N),\n    writeln(N),\n    \
                halt(3).\n",
        exit: 3,
        broken: None,
        // A directive, without initialization/2.
        forever: "loop :- repeat, fail.\n:- loop.\n",
        hog: ":- initialization(main, main).\nmain :- numlist(1, 100000000, L), sum_list(L, S), writeln(S).\n",
    },
    Programs {
        lang: "octave",
        hello: "printf(\"hello octave\\n\");\ns = fread(stdin, Inf, \"uint8=>char\");\n\
                printf(\"%d\\n\", numel(s));\nexit(3);\n",
        exit: 3,
        broken: None,
        forever: "while true\nend\n",
        hog: "a = {};\ni = 0;\nwhile true\n  i++;\n  a{i} = ones(10 * 1024 * 1024 / 8, 1) * i;\nend\n",
    },
    Programs {
        lang: "cobol",
        hello: "IDENTIFICATION DIVISION.\nPROGRAM-ID. hello.\nENVIRONMENT DIVISION.\n\
                INPUT-OUTPUT SECTION.\nFILE-CONTROL.\n    \
                SELECT input-file ASSIGN TO KEYBOARD ORGANIZATION LINE SEQUENTIAL.\n\
                DATA DIVISION.\nFILE SECTION.\nFD input-file.\n01 input-line PIC X(1000).\n\
                WORKING-STORAGE SECTION.\n01 total PIC 9(9) VALUE 0.\n01 shown PIC Z(8)9.\n\
                01 done PIC X VALUE \"N\".\nPROCEDURE DIVISION.\n    DISPLAY \"hello cobol\"\n    \
                OPEN INPUT input-file\n    PERFORM UNTIL done = \"Y\"\n        READ input-file\n            \
                AT END MOVE \"Y\" TO done\n            \
                NOT AT END ADD FUNCTION LENGTH(FUNCTION TRIM(input-line)) TO total\n        \
                END-READ\n    END-PERFORM\n    CLOSE input-file\n    MOVE total TO shown\n    \
                DISPLAY FUNCTION TRIM(shown)\n    MOVE 3 TO RETURN-CODE\n    STOP RUN.\n",
        exit: 3,
        broken: Some("IDENTIFICATION DIVISION.\nPROGRAM-ID. hello.\nPROCEDURE DIVISION.\n    MOVE x TO y.\n"),
        // In fixed format, with a comment in column 7.
        forever: concat!(
            "      * counts for ever\n",
            "       IDENTIFICATION DIVISION.\n",
            "       PROGRAM-ID. hello.\n",
            "       DATA DIVISION.\n",
            "       WORKING-STORAGE SECTION.\n",
            "       01 n PIC 9(9) VALUE 0.\n",
            "       PROCEDURE DIVISION.\n",
            "           PERFORM FOREVER\n",
            "               ADD 1 TO n\n",
            "               IF n > 99999999 MOVE 0 TO n END-IF\n",
            "           END-PERFORM\n",
            "           STOP RUN.\n",
        ),
        // An item is at most 256 MiB: three of 200 MiB.
        hog: "IDENTIFICATION DIVISION.\nPROGRAM-ID. hello.\nDATA DIVISION.\n\
              WORKING-STORAGE SECTION.\n01 i PIC 9(4) VALUE 0.\n\
              01 one.\n    05 a PIC X(1048576) OCCURS 200.\n\
              01 two.\n    05 b PIC X(1048576) OCCURS 200.\n\
              01 three.\n    05 c PIC X(1048576) OCCURS 200.\nPROCEDURE DIVISION.\n    \
              PERFORM VARYING i FROM 1 BY 1 UNTIL i > 200\n        \
              MOVE ALL \"x\" TO a(i) b(i) c(i)\n    \
              END-PERFORM\n    DISPLAY \"touched\"\n    STOP RUN.\n",
    },
    Programs {
        lang: "ada",
        hello: "with Ada.Text_IO; use Ada.Text_IO;\nwith Ada.Integer_Text_IO;\nwith Ada.Command_Line;\n\
                procedure Hello is\n   N : Natural := 0;\nbegin\n   Put_Line (\"hello ada\");\n   \
                while not End_Of_File loop\n      declare\n         L : constant String := Get_Line;\n      \
                begin\n         N := N + L'Length;\n      end;\n   end loop;\n   \
                Ada.Integer_Text_IO.Put (N, Width => 0);\n   New_Line;\n   \
                Ada.Command_Line.Set_Exit_Status (3);\nend Hello;\n",
        exit: 3,
        broken: Some("procedure Main is\nbegin\n   X := 1;\nend Main;\n"),
        forever: "procedure Main is\n   N : Integer := 0 with Volatile;\nbegin\n   loop\n      \
                  N := N + 1;\n      if N > 1000 then N := 0; end if;\n   end loop;\nend Main;\n",
        hog: "procedure Main is\n   type Block is array (1 .. 10 * 1024 * 1024) of Character;\n   \
              type Ptr is access Block;\n   P : Ptr;\nbegin\n   loop\n      \
              P := new Block'(others => 'x');\n   end loop;\nend Main;\n",
    },
    Programs {
        lang: "commonlisp",
        hello: "(write-line \"hello commonlisp\")\n\
                (let ((n 0))\n  (loop for c = (read-char *standard-input* nil) while c do (incf n))\n  \
                (format t \"~d~%\" n))\n(sb-ext:exit :code 3)\n",
        exit: 3,
        broken: None,
        forever: "(loop)\n",
        hog: "(defvar *l* nil)\n(loop (push (make-array (* 10 1024 1024) \
              :element-type '(unsigned-byte 8) :initial-element 1) *l*))\n",
    },
    Programs {
        lang: "awk",
        hello: "BEGIN {\n  print \"hello awk\"\n  n = 0\n  \
                while ((getline line) > 0) n += length(line)\n  print n\n  exit 3\n}\n",
        exit: 3,
        broken: None,
        forever: "BEGIN { while (1) {} }\n",
        hog: "BEGIN { s = \"x\"; while (1) { s = s s; a[++i] = s } }\n",
    },
    Programs {
        lang: "forth",
        hello: ".( hello forth) cr\ncreate buf 4096 allot\n\
                : count-in ( -- n ) 0 begin buf 4096 stdin read-file throw dup while + repeat drop ;\n\
                count-in 0 .r cr\n3 (bye)\n",
        exit: 3,
        broken: None,
        forever: ": forever begin again ;\nforever\n",
        hog: ": hog begin 10485760 dup allocate throw swap 1 fill again ;\nhog\n",
    },
    Programs {
        lang: "bc",
        // bc cannot choose its exit code; it reads its stdin after the file, then ends.
        hello: "print \"hello bc\\n\"\n0\n",
        exit: 0,
        broken: None,
        forever: "while (1) { }\n",
        hog: "scale = 1000000\nfor (i = 0; i < 2000; i++) a[i] = 1 / 3\n",
    },
];

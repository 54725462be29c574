//! Hello worlds of Debian's languages written as tutorials and other code runners write
//! them, where that differs from the forms languages_debian.rs runs: an Erlang module
//! made for `erl -s` (start/0 or main/0, no main/1), a Prolog program that starts
//! itself with `initialization(main)`, a C# class named other than Main and C# 9's top-level statements, an Ada procedure
//! named Hello, COBOL in free format, Forth's `."` outside a definition, SQL's SELECT.
//! Each must print `Hello, World!` and end with status 0.

mod common;

use common::{language_names, stdout, Runner};

/// (language, program) pairs.
const FORMS: &[(&str, &str)] = &[
    (
        "erlang",
        "-module(hello).\n-export([start/0]).\n\nstart() ->\n    io:fwrite(\"Hello, World!\\n\").\n",
    ),
    (
        "erlang",
        "-module(main).\n-export([main/0]).\n\nmain() -> io:format(\"Hello, World!~n\").\n",
    ),
    (
        "erlang",
        "main(_Args) ->\n    io:format(\"Hello, World!~n\").\n",
    ),
    (
        "prolog",
        ":- initialization(main).\n\nmain :- write('Hello, World!'), nl.\n",
    ),
    ("csharp", "Console.WriteLine(\"Hello, World!\");\n"),
    (
        "csharp",
        "using System.Text;\nvar greeting = new StringBuilder(\"Hello, \");\n\
         greeting.Append(\"World!\");\nConsole.WriteLine(greeting);\n",
    ),
    (
        "csharp",
        "using System;\n\nclass Program\n{\n    static void Main(string[] args)\n    {\n        \
         Console.WriteLine(\"Hello, World!\");\n    }\n}\n",
    ),
    (
        "ada",
        "with Ada.Text_IO; use Ada.Text_IO;\n\nprocedure Hello is\nbegin\n   \
         Put_Line (\"Hello, World!\");\nend Hello;\n",
    ),
    (
        "cobol",
        "IDENTIFICATION DIVISION.\nPROGRAM-ID. HELLO.\nPROCEDURE DIVISION.\n    \
         DISPLAY 'Hello, World!'.\n    STOP RUN.\n",
    ),
    ("forth", ".\" Hello, World!\" cr\n"),
    ("sql", "SELECT 'Hello, World!';\n"),
    ("awk", "BEGIN { print \"Hello, World!\" }\n"),
];

#[tokio::test]
async fn hello_worlds_as_tutorials_write_them() {
    let runner = Runner::start();
    let health = runner.health().await;
    let offered = language_names(&health);
    let mut failures = Vec::new();
    for (lang, code) in FORMS {
        assert!(
            offered.iter().any(|name| name == lang),
            "{lang} is not offered (run scripts/test-toolchains, which the test command runs)"
        );
        let out = runner.run_with_timeout(lang, code, Some(20_000)).await;
        if stdout(&out) != "Hello, World!\n" || out["exitCode"] != 0 {
            failures.push(format!("{lang}: {code:?}: {out}"));
        }
    }
    let count = failures.len();
    assert!(count == 0, "{count} failed:\n{}", failures.join("\n"));
}

#[tokio::test]
async fn csharp_top_level_statements_compile_errors_name_the_program_s_lines() {
    let runner = Runner::start();
    let code = "Console.WriteLine(\"fine\");\nint x = \"not a number\";\n";
    let out = runner.run_with_timeout("csharp", code, Some(20_000)).await;
    assert_eq!(out["compileError"], true, "{out}");
    let said = format!("{}{}", stdout(&out), out["stderr"].as_str().unwrap_or(""));
    assert!(said.contains("main.cs(2,"), "line 2 of main.cs: {out}");
}

//! Ruby's, Lua's and Perl's resident interpreters (the agent's `ruby.rb`, `lua.lua` and
//! `perl.pl` loaders) against the real runner, real sandboxes and the real `ruby`,
//! `lua5.4` and `perl`: what a
//! session keeps from run to run, how a run ends (exit, error, a killed interpreter, a
//! forged report), and that a one-shot program served by the warm loader answers
//! exactly as the one run by its plain command does.

mod common;

use common::{exit_code, stderr, stdout, Runner};
use serde_json::{json, Value};

fn state_lost(v: &Value) -> bool {
    v["stateLost"]
        .as_bool()
        .unwrap_or_else(|| panic!("a session's answer says stateLost: {v}"))
}

/// The answer's stdout, stderr and exit code.
fn ended(v: &Value) -> (&str, &str, i64) {
    (stdout(v), stderr(v), exit_code(v))
}

#[tokio::test]
async fn health_says_ruby_lua_and_perl_start_warm_and_keep_state() {
    let runner = Runner::start();
    let health = runner.health().await;
    let languages = health["languages"].as_array().expect("languages");
    for lang in ["ruby", "lua", "perl"] {
        let info = languages
            .iter()
            .find(|l| l["name"] == lang)
            .unwrap_or_else(|| panic!("{lang} offered: {health}"));
        assert_eq!(
            (&info["warm"], &info["keepsState"]),
            (&json!(true), &json!(true)),
            "{info}"
        );
    }
}

/// A session's run and its answer: the code, then stdout, stderr (whole, or its start
/// where it ends with `…`) and the exit code; none of them loses the session's state.
type Step = (&'static str, &'static str, &'static str, i64);

/// Runs `steps` one after the other in one session of `lang`.
async fn session_answers(lang: &str, steps: &[Step]) {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    for (code, out, err, status) in steps {
        let answer = runner.ok_in(&id, lang, code).await;
        let err_matches = match err.strip_suffix('…') {
            Some(start) => stderr(&answer).starts_with(start),
            None => stderr(&answer) == *err,
        };
        assert!(
            stdout(&answer) == *out
                && err_matches
                && exit_code(&answer) == *status
                && !state_lost(&answer),
            "{lang} {code:?}: expected {out:?} {err:?} {status}, got {answer}"
        );
    }
}

/// `exit`, `abort` and an uncaught exception end the run, not the interpreter.
const RUBY: [Step; 7] = [
    (
        "x = 41\nrequire 'set'\ndef twice(v) = 2 * v\nLIMIT = 9\nputs 'one'",
        "one\n",
        "",
        0,
    ),
    (
        "puts x + 1, twice(2), LIMIT, Set[1, 1].size, $0, __FILE__ == $0, ARGV.size",
        "42\n4\n9\n1\n/home/sandbox/main.rb\ntrue\n0\n",
        "",
        0,
    ),
    ("x += 1\nprint 'bye'\nexit 3", "bye", "", 3),
    (
        "def f = raise(ArgumentError, 'no')\nf",
        "",
        "/home/sandbox/main.rb:1:in `f': no (ArgumentError)\n\
         \tfrom /home/sandbox/main.rb:2:in `<main>'\n",
        1,
    ),
    ("abort 'gone'", "", "gone\n", 1),
    (
        "puts 'a' +",
        "",
        "/home/sandbox/main.rb:1: syntax error…",
        1,
    ),
    ("p x, twice(x)", "42\n84\n", "", 0),
];

#[tokio::test]
async fn ruby_locals_methods_constants_and_requires_live_across_runs() {
    session_answers("ruby", &RUBY).await;
}

/// os.exit and an error end the run, not the interpreter; a chunk's locals end with it.
const LUA: [Step; 6] = [
    (
        "x = 41\nlocal hidden = 1\nfunction twice(v) return 2 * v end\nprint('one')",
        "one\n",
        "",
        0,
    ),
    (
        "print(x + 1, twice(2), hidden, arg[0], io.read('a'))",
        "42\t4\tnil\t/home/sandbox/main.lua\t\n",
        "",
        0,
    ),
    ("x = x + 1\nio.write('bye')\nos.exit(3)", "bye", "", 3),
    (
        "local function f() error('no') end\nf()",
        "",
        "lua5.4: /home/sandbox/main.lua:1: no\nstack traceback:\n\
         \t[C]: in function 'error'\n\
         \t/home/sandbox/main.lua:1: in local 'f'\n\
         \t/home/sandbox/main.lua:2: in main chunk\n\
         \t[C]: in ?\n",
        1,
    ),
    (
        "print(('x'",
        "",
        "lua5.4: /home/sandbox/main.lua:1: ')' expected…",
        1,
    ),
    (
        "print(x, twice(x), os.exit ~= nil)",
        "42\t84\ttrue\n",
        "",
        0,
    ),
];

#[tokio::test]
async fn lua_globals_live_across_runs_and_locals_do_not() {
    session_answers("lua", &LUA).await;
}

/// exit and a die end the run (with perl's status), not the interpreter; a file's `my`
/// variables end with it.
const PERL: [Step; 6] = [
    (
        "$x = 41;\nour $y = 2;\nmy $hidden = 1;\nsub twice { 2 * shift }\n\
         use List::Util qw(sum);\nprint \"one\\n\";",
        "one\n",
        "",
        0,
    ),
    (
        "print join(' ', $x + 1, twice(2), $y, defined $hidden ? 'kept' : 'gone', \
         sum(1, 2), $0, scalar @ARGV), \"\\n\";",
        "42 4 2 gone 3 /home/sandbox/main.pl 0\n",
        "",
        0,
    ),
    ("$x++;\nprint 'bye';\nexit 3;", "bye", "", 3),
    (
        "die 'no';",
        "",
        "no at /home/sandbox/main.pl line 1.\n",
        255,
    ),
    (
        "print 'a' +;",
        "",
        "syntax error at /home/sandbox/main.pl line 1, near \"+;\"\n\
         Execution of /home/sandbox/main.pl aborted due to compilation errors.\n",
        255,
    ),
    ("print \"$x \", twice($x), \"\\n\";", "42 84\n", "", 0),
];

#[tokio::test]
async fn perl_subs_package_variables_and_modules_live_across_runs_and_my_does_not() {
    session_answers("perl", &PERL).await;
}

#[tokio::test]
async fn an_interpreter_killed_by_its_program_is_replaced_by_a_fresh_one() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let killers = [
        (
            "ruby",
            "Process.kill(:KILL, $$)",
            "p defined?(kept)",
            "nil\n",
        ),
        ("ruby", "exit! 7", "p defined?(kept)", "nil\n"),
        (
            "lua",
            "os.execute('kill -KILL ' .. io.open('/proc/self/stat'):read('n'))",
            "print(kept)",
            "nil\n",
        ),
        (
            "perl",
            "kill 'KILL', $$;",
            "print defined $kept ? 'kept' : 'nil', \"\\n\";",
            "nil\n",
        ),
    ];
    for (lang, kill, probe, fresh) in killers {
        let keep = if lang == "perl" {
            "$kept = 1;"
        } else {
            "kept = 1"
        };
        let kept = runner.ok_in(&id, lang, keep).await;
        assert_eq!(ended(&kept), ("", "", 0), "{lang}: {kept}");
        let gone = runner.ok_in(&id, lang, kill).await;
        let code = if kill.starts_with("exit!") {
            7
        } else {
            128 + 9
        };
        assert_eq!(exit_code(&gone), code, "{lang} {kill}: {gone}");
        assert!(state_lost(&gone), "{lang} {kill}: {gone}");
        let next = runner.ok_in(&id, lang, probe).await;
        assert_eq!(ended(&next), (fresh, "", 0), "{lang} {kill}: {next}");
        assert!(!state_lost(&next), "{lang} {kill}: {next}");
    }
}

#[tokio::test]
async fn a_report_forged_by_a_ruby_lua_or_perl_program_is_not_taken_for_its_end() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    // The program may write on the loader's report descriptor; a report without this
    // run's number changes nothing.
    let forgers = [
        (
            "ruby",
            "z = 5\nIO.new(4).tap { |f| f.write(%Q({\"exit\": 9}\\n{\"exit\": 8, \"run\": 99}\\n)); f.flush }\n\
             sleep 0.3\nputs 'done'",
            "p z",
        ),
        (
            "lua",
            "z = 5\nlocal f = io.open('/proc/self/fd/4', 'w')\n\
             f:write('{\"exit\": 9}\\n{\"exit\": 8, \"run\": 99}\\n')\nf:flush()\n\
             local t = os.time() + 1 repeat until os.time() >= t\nprint('done')",
            "print(z)",
        ),
        (
            "perl",
            "$z = 5;\nopen(my $f, '>&=', 4);\n\
             syswrite($f, qq({\"exit\": 9}\\n{\"exit\": 8, \"run\": 99}\\n));\n\
             select(undef, undef, undef, 0.3);\nprint \"done\\n\";",
            "print \"$z\\n\";",
        ),
    ];
    for (lang, forge, probe) in forgers {
        let forged = runner.ok_in(&id, lang, forge).await;
        assert_eq!(ended(&forged), ("done\n", "", 0), "{lang}: {forged}");
        let next = runner.ok_in(&id, lang, probe).await;
        assert_eq!(ended(&next), ("5\n", "", 0), "{lang}: {next}");
        assert!(!state_lost(&next), "{lang}: {next}");
    }
}

/// Programs whose one-shot answer must not depend on how the sandbox started them.
const ONE_SHOT: [(&str, &str); 14] = [
    (
        "ruby",
        "at_exit { puts 'bye' }\nputs [$0, __FILE__, ARGV.size, __dir__, $stdin.read].inspect\n\
         raise 'boom'",
    ),
    ("ruby", "print 'partial'\nexit 3"),
    ("ruby", "puts 'x'\nexit! 4"),
    ("ruby", "puts 'a' +"),
    ("ruby", "puts DATA.read\n__END__\nhello"),
    ("ruby", "p local_variables, defined?(go), defined?(JSON)"),
    (
        "lua",
        "print(arg[0], arg[-1], #arg, io.read('a'))\nerror('boom')",
    ),
    ("lua", "io.write('partial')\nos.exit(3)"),
    ("lua", "print(go, done, request)\nerror({})"),
    (
        "perl",
        "END { print \"bye\\n\" }\nprint \"$0 \", __FILE__, ' ', scalar(@ARGV), ' [', <STDIN> // '', \"]\\n\";\n\
         warn 'w';\ndie 'boom';",
    ),
    ("perl", "print 'partial';\nexit 3;"),
    ("perl", "use strict;\n$x = 1;"),
    ("perl", "open my $f, '<', '/nonexistent';\ndie \"x\\n\";"),
    ("perl", "print <DATA>;\n__END__\nhello"),
];

/// Which way a program was started: by its command, or by its loader (whose frames a
/// Ruby program's `caller` shows, whose command line Lua's shows).
const HOW: [(&str, &str); 3] = [
    ("ruby", "print caller.empty? ? 'command' : 'loader'"),
    (
        "lua",
        "local cmdline = io.open('/proc/self/cmdline'):read('a')\n\
         io.write(cmdline:find('\\0-e\\0') and 'loader' or 'command')",
    ),
    ("perl", "print caller() ? 'loader' : 'command';"),
];

#[tokio::test]
async fn one_shot_programs_answer_the_same_from_the_warm_loader_as_from_their_command() {
    let runner = Runner::start();
    for (lang, how) in HOW {
        // The first run of a language takes a sandbox prepared for none (its command);
        // the pool then prepares the next ones for it (its loader).
        let mut started = Vec::new();
        for _ in 0..3 {
            started.push(stdout(&runner.run(lang, how).await).to_owned());
            runner.wait_until_full().await;
        }
        assert_eq!(
            started,
            ["command", "loader", "loader"],
            "{lang}: cold first, warm after"
        );
    }
    for (lang, code) in ONE_SHOT {
        runner.run(lang, "").await;
        runner.wait_until_full().await;
        let warm = runner.run(lang, code).await;
        assert_eq!(warm["timedOut"], false, "{lang} {code}: {warm}");
        let (status, cold) = cold_run(lang, code).await;
        assert_eq!(status, 200, "{cold}");
        assert_eq!(
            ended(&warm),
            ended(&cold),
            "{lang} {code}: warm {warm}, cold {cold}"
        );
    }
}

/// Runs `code` on a runner whose `lang` row has no loader: by its plain command.
async fn cold_run(lang: &str, code: &str) -> (u16, Value) {
    let dir = tempfile::tempdir().expect("a folder");
    let rows = dir.path().join("cold.toml");
    let (file, program, version) = match lang {
        "ruby" => ("main.rb", "ruby", "--version"),
        "perl" => ("main.pl", "perl", "--version"),
        _ => ("main.lua", "lua5.4", "-v"),
    };
    std::fs::write(
        &rows,
        format!(
            "[[language]]\nname = \"{lang}\"\nfile = \"{file}\"\nrun = [\"{program}\", \"{{file}}\"]\n\
             requires = [\"/usr/bin/{program}\"]\nversion = [\"{program}\", \"{version}\"]\n"
        ),
    )
    .expect("the rows");
    let runner = Runner::with(common::Options {
        extra: vec!["--languages".into(), rows.to_string_lossy().into_owned()],
        ..Default::default()
    });
    runner.post(&json!({"lang": lang, "code": code})).await
}

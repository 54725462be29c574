//! What lives on in a session's interpreters (Python globals, Node declarations), when
//! it is lost, and the files a run hands back from `outputs/`: against the real runner,
//! real sandboxes and real interpreters.

mod common;

use common::{exit_code, stderr, stdout, Runner};
use serde_json::{json, Value};

fn state_lost(v: &Value) -> bool {
    v["stateLost"]
        .as_bool()
        .unwrap_or_else(|| panic!("a session's answer says stateLost: {v}"))
}

#[tokio::test]
async fn python_globals_imports_and_functions_live_across_runs() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let first = runner
        .ok_in(
            &id,
            "python",
            "x = 41\nimport json\ndef twice(v):\n    return 2 * v\n",
        )
        .await;
    assert_eq!(exit_code(&first), 0, "{first}");
    assert!(!state_lost(&first), "{first}");
    let second = runner
        .ok_in(
            &id,
            "python",
            "print(x + 1, json.dumps([twice(1)]), __name__)",
        )
        .await;
    assert_eq!(stdout(&second), "42 [2] __main__\n", "{second}");

    // An exception or sys.exit ends the run, not the interpreter.
    let raised = runner
        .ok_in(&id, "python", "x += 1\nraise ValueError('no')")
        .await;
    assert_eq!(exit_code(&raised), 1, "{raised}");
    assert!(stderr(&raised).contains("ValueError: no"), "{raised}");
    assert!(stderr(&raised).contains("main.py"), "{raised}");
    assert!(!state_lost(&raised), "{raised}");
    let exited = runner.ok_in(&id, "python", "import sys\nsys.exit(3)").await;
    assert_eq!(exit_code(&exited), 3, "{exited}");
    let after = runner.ok_in(&id, "python", "print(x)").await;
    assert_eq!(stdout(&after), "42\n", "{after}");
    assert!(!state_lost(&after), "{after}");
}

#[tokio::test]
async fn node_declarations_and_globals_live_across_runs() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let first = runner
        .ok_in(
            &id,
            "node",
            "var a = 1; let b = 2; const c = 3; function f() { return a + b + c; }\n\
             globalThis.g = 7;\nsetTimeout(() => console.log('timer'), 200);",
        )
        .await;
    // The run waits for what it started, as `node FILE` would.
    assert_eq!(stdout(&first), "timer\n", "{first}");
    let second = runner
        .ok_in(
            &id,
            "node",
            "console.log(f(), g, typeof require('fs').readFileSync);",
        )
        .await;
    assert_eq!(stdout(&second), "6 7 function\n", "{second}");
    assert!(!state_lost(&second), "{second}");

    // ES module syntax runs as a module; globalThis is still the session's.
    let module = runner
        .ok_in(
            &id,
            "node",
            "const os = await import('os'); console.log(typeof os.cpus, g);",
        )
        .await;
    assert_eq!(stdout(&module), "function 7\n", "{module}");

    // process.exit, an exception, a rejected promise: the run ends with its code, the
    // context stays.
    let exited = runner
        .ok_in(
            &id,
            "node",
            "console.log('bye'); process.exit(4); console.log('no')",
        )
        .await;
    assert_eq!(
        (stdout(&exited), exit_code(&exited)),
        ("bye\n", 4),
        "{exited}"
    );
    let thrown = runner
        .ok_in(&id, "node", "Promise.reject(new Error('boom'))")
        .await;
    assert_eq!(exit_code(&thrown), 1, "{thrown}");
    assert!(stderr(&thrown).contains("Error: boom"), "{thrown}");
    assert!(
        !stderr(&thrown).contains("[eval]"),
        "no loader frames: {thrown}"
    );
    let after = runner.ok_in(&id, "node", "console.log(a + g)").await;
    assert_eq!(stdout(&after), "8\n", "{after}");
    assert!(!state_lost(&after), "{after}");
}

#[tokio::test]
async fn a_killed_interpreter_says_its_state_is_lost_and_the_session_goes_on() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(&id, "python", "x = 1\nopen('kept', 'w').write('yes')")
        .await;
    let body = json!({"lang": "python", "code": "while True: pass", "timeoutMs": 1000});
    let (status, timed_out) = runner
        .request("POST", &format!("/sessions/{id}/run"), Some(&body))
        .await;
    assert_eq!(status, 200, "{timed_out}");
    assert_eq!(timed_out["timedOut"], true, "{timed_out}");
    assert!(state_lost(&timed_out), "{timed_out}");

    let fresh = runner
        .ok_in(
            &id,
            "python",
            "print(open('kept').read(), 'x' in globals())",
        )
        .await;
    assert_eq!(stdout(&fresh), "yes False\n", "{fresh}");
    assert!(!state_lost(&fresh), "{fresh}");

    // The program ending its interpreter itself.
    runner.ok_in(&id, "python", "y = 2").await;
    let gone = runner.ok_in(&id, "python", "import os\nos._exit(7)").await;
    assert_eq!(exit_code(&gone), 7, "{gone}");
    assert!(state_lost(&gone), "{gone}");
    let next = runner.ok_in(&id, "python", "print('y' in globals())").await;
    assert_eq!(stdout(&next), "False\n", "{next}");

    // A one-shot answer has no stateLost at all.
    let once = runner.run("python", "print(1)").await;
    assert!(once.get("stateLost").is_none(), "{once}");
}

#[tokio::test]
async fn a_report_forged_by_the_program_is_not_taken_for_its_end() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    // The program may write on the loader's report descriptor; a report without the
    // run's number (which only the loader is told) changes nothing.
    let forged = runner
        .ok_in(
            &id,
            "python",
            "import os, time\nz = 5\nos.write(4, b'{\"exit\": 9}\\n')\ntime.sleep(0.3)\nprint('done')",
        )
        .await;
    assert_eq!(
        (stdout(&forged), exit_code(&forged)),
        ("done\n", 0),
        "{forged}"
    );
    let next = runner.ok_in(&id, "python", "print(z)").await;
    assert_eq!((stdout(&next), exit_code(&next)), ("5\n", 0), "{next}");
}

/// The smallest PNG (a 1x1 pixel).
const PNG_B64: &str = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNkYPhfDwAChwGA60e6kgAAAABJRU5ErkJggg==";

fn outputs(v: &Value) -> Vec<(String, String, u64, bool)> {
    v["outputs"]
        .as_array()
        .unwrap_or_else(|| panic!("outputs in {v}"))
        .iter()
        .map(|f| {
            (
                f["path"].as_str().unwrap().to_owned(),
                f["mimeType"].as_str().unwrap().to_owned(),
                f["size"].as_u64().unwrap(),
                f.get("data").is_some(),
            )
        })
        .collect()
}

#[tokio::test]
async fn a_one_shot_run_hands_back_what_it_wrote_to_outputs() {
    let runner = Runner::start();
    let code = format!(
        "import base64, os\n\
         open('outputs/result.csv', 'w').write('a,b\\n1,2\\n')\n\
         os.makedirs('outputs/plots')\n\
         open('outputs/plots/p.png', 'wb').write(base64.b64decode('{PNG_B64}'))\n\
         open('outputs/big.bin', 'wb').write(b'\\0' * (5 << 20))\n\
         os.symlink('/etc/passwd', 'outputs/passwd')\n\
         open('not-an-output.txt', 'w').write('x')\n"
    );
    let out = runner.run("python", &code).await;
    assert_eq!(exit_code(&out), 0, "{out}");
    assert_eq!(
        outputs(&out),
        vec![
            (
                "big.bin".into(),
                "application/octet-stream".into(),
                5 << 20,
                false
            ),
            ("plots/p.png".into(), "image/png".into(), 70, true),
            ("result.csv".into(), "text/csv".into(), 8, true),
        ],
        "{out}"
    );
    let png = &out["outputs"][1]["data"];
    assert_eq!(png, PNG_B64, "{out}");
    assert_eq!(out["outputsTruncated"], false, "{out}");

    let none = runner.run("bash", "echo hi").await;
    assert_eq!(none["outputs"], json!([]), "{none}");
}

#[tokio::test]
async fn outputs_are_bounded_in_total_and_hostile_entries_are_skipped() {
    let runner = Runner::start();
    // Three files of 3 MiB: two fit the 8 MiB the answer carries, the third is listed
    // without its bytes. A FIFO (which would block a reader) and a symlink to a folder
    // outside are skipped.
    let out = runner
        .run(
            "bash",
            "for n in 1 2 3; do head -c 3145728 /dev/zero > outputs/f$n; done; \
             mkfifo outputs/fifo; ln -s / outputs/root; ln -s /etc outputs/etc",
        )
        .await;
    let listed: Vec<(String, bool)> = outputs(&out).into_iter().map(|o| (o.0, o.3)).collect();
    assert_eq!(
        listed,
        [
            ("f1".into(), true),
            ("f2".into(), true),
            ("f3".into(), false)
        ],
        "{out}"
    );
}

#[tokio::test]
async fn a_session_run_hands_back_only_what_it_wrote_or_changed() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    let first = runner
        .ok_in(
            &id,
            "bash",
            "echo one > outputs/a.txt; echo two > outputs/b.txt",
        )
        .await;
    let names = |v: &Value| -> Vec<String> { outputs(v).into_iter().map(|o| o.0).collect() };
    assert_eq!(names(&first), ["a.txt", "b.txt"], "{first}");
    let unchanged = runner
        .ok_in(&id, "python", "print('nothing written')")
        .await;
    assert_eq!(names(&unchanged), Vec::<String>::new(), "{unchanged}");
    let changed = runner
        .ok_in(
            &id,
            "node",
            "require('fs').appendFileSync('outputs/a.txt', 'more\\n')",
        )
        .await;
    assert_eq!(names(&changed), ["a.txt"], "{changed}");
    let many = runner
        .ok_in(
            &id,
            "bash",
            "for i in $(seq 100); do echo $i > outputs/n$i; done",
        )
        .await;
    assert_eq!(names(&many).len(), 64, "{many}");
    assert_eq!(many["outputsTruncated"], true, "{many}");
}

#[tokio::test]
async fn bash_keeps_its_working_directory_and_exported_variables() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(
            &id,
            "bash",
            "mkdir -p work && cd work && export GREETING=hi && LOCAL=no",
        )
        .await;
    let out = runner
        .ok_in(
            &id,
            "bash",
            "pwd; echo \"$GREETING ${LOCAL:-unset} $0\"; exit 3",
        )
        .await;
    assert_eq!(
        stdout(&out),
        "/home/sandbox/work\nhi unset /home/sandbox/main.sh\n",
        "{out}"
    );
    assert_eq!(exit_code(&out), 3, "{out}");
    // A one-shot run starts where it always does.
    let once = runner.run("bash", "pwd; echo \"${GREETING:-unset}\"").await;
    assert_eq!(stdout(&once), "/home/sandbox\nunset\n", "{once}");
}

/// The state letter and CPU ticks (user + system) of a host process, from its stat file.
fn host_state(pid: &str) -> (char, u64) {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).expect("stat");
    let after = &stat[stat.rfind(')').expect("comm") + 2..];
    let fields: Vec<&str> = after.split(' ').collect();
    let ticks = fields[11].parse::<u64>().unwrap() + fields[12].parse::<u64>().unwrap();
    (fields[0].chars().next().unwrap(), ticks)
}

#[tokio::test]
async fn between_runs_a_session_s_processes_are_stopped_and_use_no_cpu() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    runner
        .ok_in(
            &id,
            "bash",
            "bash -c 'while :; do :; done; echo spin-7a1' &",
        )
        .await;
    runner.ok_in(&id, "python", "resident = True").await;
    let spinner = common::host_processes_with("spin-7a1");
    assert_eq!(spinner.len(), 1, "{spinner:?}");
    let pid = spinner[0].split(':').next().unwrap().to_owned();
    let (state, before) = host_state(&pid);
    assert!(
        common::held_between_calls(&pid),
        "frozen between runs: {state} {:?}",
        common::freezer_state(&pid)
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(host_state(&pid), (state, before), "no CPU while frozen");

    // The next run wakes everything: the spinner runs again, the interpreter kept its
    // state.
    let out = runner
        .ok_in(
            &id,
            "python",
            "import subprocess, time\ntime.sleep(0.3)\n\
             print(resident, subprocess.run(['ps', '-o', 'stat=', '-C', 'bash'], \
             capture_output=True, text=True).stdout.split())",
        )
        .await;
    assert!(stdout(&out).starts_with("True ["), "{out}");
    assert!(
        stdout(&out).contains("'R"),
        "the spinner runs during a run: {out}"
    );
    assert!(host_state(&pid).1 > before, "it used CPU during the run");
}

/// The processes of the host cgroup (memory controller) that holds `pid`.
fn cgroup_mates(pid: &str) -> Vec<String> {
    let cgroups = std::fs::read_to_string(format!("/proc/{pid}/cgroup")).expect("cgroup");
    let (root, rel) = cgroups
        .lines()
        .find_map(|l| {
            let mut parts = l.splitn(3, ':');
            let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
            match controllers {
                "memory" => Some(("/sys/fs/cgroup/memory", path.to_owned())),
                "" => Some(("/sys/fs/cgroup", path.to_owned())),
                _ => None,
            }
        })
        .expect("a memory cgroup");
    std::fs::read_to_string(format!("{root}{rel}/cgroup.procs"))
        .expect("cgroup.procs")
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test]
async fn a_program_that_keeps_forking_is_stopped_all_the_same() {
    let runner = Runner::start();
    let id = runner.open_session(json!({})).await;
    // Children forked while the agent stops the others must not escape the rest.
    runner
        .ok_in(
            &id,
            "bash",
            "bash -c 'while :; do (while :; do :; done) & sleep 0.01; kill $! 2>/dev/null; done; \
             echo fork-3c9' &\nsleep 0.2",
        )
        .await;
    // The forking bash and its latest child (a subshell, of the same command line).
    let forker = common::host_processes_with("fork-3c9");
    assert!(!forker.is_empty(), "{forker:?}");
    let pid = forker[0].split(':').next().unwrap().to_owned();
    let mates = cgroup_mates(&pid);
    assert!(mates.len() >= 2, "{mates:?}");
    // The program's processes: those of the program's user (the agent and the jail
    // that started it run as others).
    let uid_of = |p: &str| -> String {
        let status = std::fs::read_to_string(format!("/proc/{p}/status")).unwrap_or_default();
        status
            .lines()
            .find(|l| l.starts_with("Uid:"))
            .unwrap_or_default()
            .to_owned()
    };
    let programs: Vec<String> = mates
        .iter()
        .filter(|p| uid_of(p) == uid_of(&pid))
        .cloned()
        .collect();
    assert!(programs.len() >= 2, "{programs:?} of {mates:?}");
    let states =
        |procs: &[String]| -> Vec<(char, u64)> { procs.iter().map(|p| host_state(p)).collect() };
    let first = states(&programs);
    assert!(
        programs.iter().all(|p| common::held_between_calls(p)),
        "every program frozen: {first:?} ({programs:?} of {mates:?}, {:?})",
        common::freezer_state(&pid)
    );
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(
        states(&programs),
        first,
        "nothing ran while the session rested"
    );
    assert_eq!(
        cgroup_mates(&pid),
        mates,
        "nothing was forked while it rested"
    );
}

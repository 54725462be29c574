//! The package set and inline dependencies, through the real runner: the default set
//! imports, it is read-only inside, a plot comes back as a PNG, and a PEP 723 block is
//! resolved on the host (or refused, running nothing), cached, and mounted for its own
//! sandbox alone. The store is the one `sandbox-runner packages build` makes (the
//! README's test command builds it first).

mod common;

use common::{exit_code, require_packages, stderr, stdout, Options, Runner};
use serde_json::{json, Value};

/// Every module of the default Python set, by its import name.
const PYTHON_MODULES: &str = "numpy, pandas, matplotlib, scipy, sympy, sklearn, seaborn, \
                              PIL, networkx, openpyxl, yaml, bs4, lxml, tabulate, requests";

/// A PEP 723 block declaring `deps`, then `body`.
fn script(deps: &[&str], body: &str) -> String {
    let list: Vec<String> = deps.iter().map(|d| format!("{d:?}")).collect();
    format!(
        "# /// script\n# dependencies = [{}]\n# ///\n{body}",
        list.join(", ")
    )
}

/// A runner with the default store and these extra flags and variables.
fn start(extra: &[&str], env: &[(&str, &str)]) -> Runner {
    require_packages();
    Runner::with(Options {
        pool_size: 2,
        extra: extra.iter().map(|s| s.to_string()).collect(),
        env: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        ..Options::default()
    })
}

/// Posts a Python run; its status and body.
async fn post_python(runner: &Runner, code: &str) -> (u16, Value) {
    runner.post(&json!({"lang": "python", "code": code})).await
}

/// Asserts a refusal: status, code, a message naming `names`, and nothing run.
fn assert_refused(answer: &(u16, Value), status: u16, code: &str, names: &str) {
    let (got, body) = answer;
    assert_eq!(*got, status, "{body}");
    assert_eq!(body["error"]["code"], code, "{body}");
    let message = body["error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains(names), "the message names {names}: {body}");
    assert!(body.get("stdout").is_none(), "nothing ran: {body}");
}

#[tokio::test]
async fn every_default_package_imports_in_a_one_shot_run() {
    let runner = start(&[], &[]);
    let out = runner
        .run("python", &format!("import {PYTHON_MODULES}\nprint('ok')"))
        .await;
    assert_eq!(stdout(&out), "ok\n", "{out}");
    let cjs = "const _ = require('lodash'); const { z } = require('zod'); \
               const { format } = require('date-fns');\n\
               console.log(_.sum([1, 2]), z.number().parse(3), format(new Date(0), 'yyyy'))";
    let out = runner.run("node", cjs).await;
    assert_eq!(stdout(&out), "3 3 1970\n", "{out}");
    let esm = "import _ from 'lodash'; import { z } from 'zod';\n\
               console.log(_.max([4, 2]), z.string().parse('esm'))";
    let out = runner.run("node", esm).await;
    assert_eq!(stdout(&out), "4 esm\n", "{out}");
    let out = runner
        .run("bash", "python3 -c 'import pandas; print(pandas.__name__)'")
        .await;
    assert_eq!(
        stdout(&out),
        "pandas\n",
        "bash's python3 sees the set too: {out}"
    );
}

#[tokio::test]
async fn health_lists_the_set_and_what_is_warm() {
    let runner = start(&[], &[]);
    let health = runner.health().await;
    let packages = &health["packages"];
    let names = |lang: &str| -> Vec<String> {
        packages[lang]
            .as_array()
            .unwrap_or(&Vec::new())
            .iter()
            .map(|p| p["name"].as_str().unwrap_or_default().to_owned())
            .collect()
    };
    for name in ["numpy", "pandas", "matplotlib", "scikit-learn", "requests"] {
        assert!(names("python").contains(&name.to_owned()), "{health}");
    }
    for name in ["lodash", "date-fns", "zod"] {
        assert!(names("node").contains(&name.to_owned()), "{health}");
    }
    assert_eq!(
        packages["warmImports"],
        json!(["numpy", "pandas", "matplotlib.pyplot"])
    );
    assert_eq!(packages["inlineDependencies"], true, "{health}");
    assert!(packages["key"].as_str().is_some_and(|k| k.len() == 64));
}

#[tokio::test]
async fn the_package_folders_are_read_only_inside() {
    let runner = start(&[], &[]);
    let hostile =
        "for path in /opt/packages/python/numpy/__init__.py /opt/packages/python/evil.py \
                   /opt/packages/node/node_modules/lodash/lodash.js /opt/deps/evil \
                   /node_modules/evil; do\n\
                     if echo pwned >> $path 2>/dev/null; then echo \"WROTE $path\"; fi\n\
                   done\n\
                   mkdir /opt/deps/x 2>/dev/null && echo MKDIR\n\
                   ln -s /tmp /opt/deps/link 2>/dev/null && echo LINK\n\
                   rm -rf /opt/packages/python/pandas 2>/dev/null\n\
                   test -d /opt/packages/python/pandas && echo intact\n\
                   python3 -c 'import numpy; print(numpy.__file__)'";
    let out = runner.run("bash", hostile).await;
    assert_eq!(
        stdout(&out),
        "intact\n/opt/packages/python/numpy/__init__.py\n",
        "{out}"
    );
    let key = runner.health().await["packages"]["key"]
        .as_str()
        .unwrap()
        .to_owned();
    let host = format!(
        "{}/sets/{key}/python/numpy/__init__.py",
        common::PACKAGES_DIR
    );
    let text = std::fs::read_to_string(&host).expect("the host's copy");
    assert!(!text.contains("pwned"), "the host's set is untouched");
}

#[tokio::test]
async fn a_plot_comes_back_as_a_png() {
    let runner = start(&[], &[]);
    let code = "import pandas as pd, matplotlib.pyplot as plt\n\
                df = pd.DataFrame({'x': [1, 2, 3], 'y': [3, 1, 2]})\n\
                print(df.describe().loc['mean', 'y'])\n\
                df.plot(x='x', y='y')\n\
                plt.show()\n\
                plt.figure(); plt.bar(['a', 'b'], [1, 2])  # left open: shown at the end\n";
    let out = runner.run("python", code).await;
    assert_eq!(stdout(&out), "2.0\n", "{out}");
    let outputs = out["outputs"].as_array().expect("outputs");
    let paths: Vec<&str> = outputs.iter().filter_map(|o| o["path"].as_str()).collect();
    assert_eq!(paths, ["figure-1.png", "figure-2.png"], "{out}");
    for file in outputs {
        assert_eq!(file["mimeType"], "image/png", "{file}");
        let data = file["data"].as_str().expect("the bytes, base64");
        assert!(data.starts_with("iVBORw0KGgo"), "a PNG: {}", &data[..16]);
    }
}

#[tokio::test]
async fn inline_dependencies_resolve_run_and_are_cached() {
    let runner = start(&[], &[]);
    let code = script(
        &["humanize"],
        "import humanize, sys\nprint(humanize.naturalsize(123456789))\n\
         print([p for p in sys.path if p.startswith('/opt/deps/')])",
    );
    let out = runner.run("python", &code).await;
    let lines: Vec<&str> = stdout(&out).lines().collect();
    assert_eq!(lines.first(), Some(&"123.5 MB"), "{out}");
    assert!(lines[1].contains("/opt/deps/"), "{out}");
    drop(runner);
    // A runner whose pip reaches no index: the same declaration is served from the
    // cache (no network needed), and another one is refused, naming the cause.
    let offline = start(
        &[],
        &[
            ("PIP_INDEX_URL", "http://127.0.0.1:9/simple"),
            ("PIP_FIND_LINKS", ""),
        ],
    );
    let out = offline.run("python", &code).await;
    assert_eq!(stdout(&out).lines().next(), Some("123.5 MB"), "{out}");
    let answer = post_python(&offline, &script(&["six"], "print('RAN')")).await;
    assert_refused(&answer, 422, "index_unreachable", "six");
}

#[tokio::test]
async fn refused_dependencies_run_nothing_and_say_why() {
    // A store of its own (no set), so that what the refusals leave in it is theirs alone.
    let store = std::env::temp_dir().join(format!("refusals-store-{}", std::process::id()));
    let store_flag = store.display().to_string();
    let runner = start(
        &[
            "--packages-dir",
            &store_flag,
            "--deps-deny",
            "humanize",
            "--deps-max-mb",
            "1",
        ],
        &[],
    );
    let denied = post_python(&runner, &script(&["humanize"], "print('RAN')")).await;
    assert_refused(&denied, 422, "dependency_denied", "humanize");
    let missing = "no-such-package-sandbox-mcp-7f3a";
    let not_found = post_python(&runner, &script(&[missing], "print('RAN')")).await;
    assert_refused(&not_found, 422, "dependency_not_found", missing);
    let too_big = post_python(&runner, &script(&["rich"], "print('RAN')")).await;
    assert_refused(&too_big, 422, "dependency_too_large", "MiB");
    let bad = "# /// script\n# dependencies = [1, 2\n# ///\nprint('RAN')";
    let malformed = post_python(&runner, bad).await;
    assert_refused(&malformed, 400, "bad_script_metadata", "TOML");
    let leftovers = |dir: &str| {
        std::fs::read_dir(store.join(dir))
            .map(|entries| entries.count())
            .unwrap_or(0)
    };
    assert_eq!(
        leftovers("tmp"),
        0,
        "nothing half-installed is left in the store"
    );
    assert_eq!(
        leftovers("deps"),
        1,
        "no set but the cache's folder: {store:?}"
    );
    drop(runner);
    let _ = std::process::Command::new("chmod")
        .args(["-R", "u+w"])
        .arg(&store)
        .status();
    let _ = std::fs::remove_dir_all(&store);
    let off = runner_off().await;
    let disabled = post_python(&off, &script(&["humanize"], "print('RAN')")).await;
    assert_refused(&disabled, 422, "dependencies_disabled", "humanize");
    // A program without a block runs as ever on the same runner.
    assert_eq!(
        stdout(&off.run("python", "print('plain')").await),
        "plain\n"
    );
}

async fn runner_off() -> Runner {
    let off = start(&["--no-inline-deps"], &[]);
    assert_eq!(off.health().await["packages"]["inlineDependencies"], false);
    off
}

#[tokio::test]
async fn a_session_keeps_its_inline_dependencies_and_no_one_else_sees_them() {
    let runner = start(&[], &[]);
    let id = runner.open_session(json!({})).await;
    let first = script(
        &["humanize"],
        "import humanize\nprint(humanize.intcomma(1234567))",
    );
    let out = runner.ok_in(&id, "python", &first).await;
    assert_eq!(stdout(&out), "1,234,567\n", "{out}");
    let later = runner
        .ok_in(
            &id,
            "python",
            "import subprocess\nprint(humanize.intcomma(7654321))\n\
             print(subprocess.run(['ls', '/opt/deps'], capture_output=True, text=True).stdout.count('\\n'))",
        )
        .await;
    assert_eq!(stdout(&later), "7,654,321\n1\n", "{later}");
    // A one-shot sandbox running meanwhile has none of the session's.
    let other = runner
        .run(
            "python",
            "import os\nprint(os.listdir('/opt/deps'))\n\
             try:\n    import humanize\nexcept ImportError:\n    print('no humanize')",
        )
        .await;
    assert_eq!(stdout(&other), "[]\nno humanize\n", "{other}");
    assert_eq!(exit_code(&other), 0, "{}", stderr(&other));
}

/// The mount points a sandbox's mountinfo lists (its fifth field), sorted.
fn mount_points(mountinfo: &str) -> Vec<String> {
    let mut points: Vec<String> = mountinfo
        .lines()
        .filter_map(|line| line.split(' ').nth(4).map(str::to_owned))
        .collect();
    points.sort();
    points
}

/// Sandboxes' mounts are slaves (so that their inline dependencies can be mounted in
/// from the host): what the host mounts while a sandbox lives must still not show in
/// it, whether below the host's own folders or below the runner's shared mount (outside
/// that sandbox's own folder).
#[tokio::test]
async fn host_mounts_made_while_a_sandbox_lives_never_show_in_it() {
    let runner = start(&[], &[]);
    let id = runner.open_session(json!({})).await;
    let look = "cat /proc/self/mountinfo";
    let before = mount_points(stdout(&runner.ok_in(&id, "bash", look).await));
    let secret_dir = std::env::temp_dir().join(format!("hostile-mount-{}", std::process::id()));
    let shared = format!(
        "/run/sandbox-runner/deps/r{}/sandboxes/intruder",
        runner.pid()
    );
    let mut mounted = Vec::new();
    for dir in [secret_dir.display().to_string(), shared] {
        std::fs::create_dir_all(&dir).expect("a folder to mount on");
        let status = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", "size=1m", "tmpfs", &dir])
            .status()
            .expect("mount ran");
        assert!(status.success(), "mounting on {dir}");
        std::fs::write(format!("{dir}/secret"), "TOPSECRET-mount").expect("the secret");
        mounted.push(dir);
    }
    let out = runner
        .ok_in(
            &id,
            "bash",
            "cat /proc/self/mountinfo; grep -rls TOPSECRET /opt /tmp /home /etc /dev 2>/dev/null; true",
        )
        .await;
    for dir in &mounted {
        let _ = std::process::Command::new("umount").arg(dir).status();
        let _ = std::fs::remove_dir(dir);
    }
    assert!(!stdout(&out).contains("secret"), "{out}");
    assert_eq!(mount_points(stdout(&out)), before, "{out}");
}

/// Without warm imports the program imports everything itself: the same figure, and
/// nothing on stderr (matplotlib asks fontconfig for the system's fonts: the sandbox
/// has the host's /etc/fonts).
#[tokio::test]
async fn without_warm_imports_a_plot_comes_back_the_same_and_quietly() {
    let runner = start(&["--warm-imports="], &[]);
    assert_eq!(runner.health().await["packages"]["warmImports"], json!([]));
    let code = "import sys\nprint('pandas' in sys.modules)\n\
                import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()";
    let out = runner.run_with_timeout("python", code, Some(60_000)).await;
    assert_eq!(stdout(&out), "False\n", "{out}");
    assert_eq!(stderr(&out), "", "{out}");
    assert_eq!(out["outputs"][0]["path"], "figure-1.png", "{out}");
}

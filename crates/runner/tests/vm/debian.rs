//! An image that holds languages of Debian's toolchains (`image build --languages
//! lua,tcl`), and a vm runner that offers what its image holds: those two, and no other
//! of Debian's languages, though the host has their toolchains.
//!
//! Its image has a cache of its own (a build points the cache's `current` at what it
//! built, and the suite's runners boot the suite's `current`), with the suite's static
//! agent and kernel package; no package set, and only bash, python and node of the
//! built-in languages (the others removed by its languages file), so that it builds in
//! seconds.

use super::*;

/// The built-in rows this test's languages file removes: their toolchains stay out of
/// its image (bash, python and node are in every image).
const LANGUAGES_FILE: &str = "remove = [\"typescript\", \"c\", \"cpp\", \"go\", \"java\"]\n";

/// `sandbox-runner image build` into this test's cache, with `--languages selection`.
fn build_with(out: &Path, file: &Path, packages: &Path, selection: &str) -> std::process::Output {
    let agent = cache_dir().join("agent-target/release/sandbox-agent");
    Command::new(env!("CARGO_BIN_EXE_sandbox-runner"))
        .args(["image", "build", "--out"])
        .arg(out)
        .arg("--agent")
        .arg(agent)
        .arg("--packages-dir")
        .arg(packages)
        .arg("--languages-file")
        .arg(file)
        .args(["--languages", selection])
        .output()
        .expect("ran image build")
}

#[tokio::test]
async fn an_image_built_with_lua_and_tcl_offers_them_and_no_other_debian_language() {
    let _serial = SERIAL.lock().await;
    // The suite's image: its static agent and kernel package serve this one too.
    image();
    let tmp = Path::new(env!("CARGO_TARGET_TMPDIR"));
    let out = tmp.join("vm-images-debian");
    std::fs::create_dir_all(&out).expect("the cache folder");
    let downloads = out.join("downloads");
    if std::fs::symlink_metadata(&downloads).is_err() {
        std::os::unix::fs::symlink(cache_dir().join("downloads"), &downloads).expect("linked");
    }
    let packages = tmp.join("vm-no-packages");
    std::fs::create_dir_all(&packages).expect("an empty package store");
    let file = tmp.join("vm-languages-debian.toml");
    std::fs::write(&file, LANGUAGES_FILE).expect("the languages file");
    assert!(
        Path::new("/usr/bin/perl").exists(),
        "Debian's perl row is offered on every Debian host: the test needs it left out"
    );

    let refused = build_with(&out, &file, &packages, "lua,nosuch");
    let said = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success(), "{said}");
    assert!(
        said.contains("\"nosuch\" is no language of the table"),
        "{said}"
    );
    assert!(
        said.contains("this host offers bash, python, node, "),
        "{said}"
    );
    assert!(said.contains(", lua, "), "{said}");
    assert!(!said.contains("[1/5]"), "refused before building: {said}");

    let started = Instant::now();
    let built = build_with(&out, &file, &packages, "lua,tcl");
    let said = String::from_utf8_lossy(&built.stderr);
    assert!(built.status.success(), "{said}");
    println!(
        "image with lua and tcl in {:.1} s:\n{}",
        started.elapsed().as_secs_f64(),
        String::from_utf8_lossy(&built.stdout)
    );
    let image = out.join("current");
    let held = sandbox_image::languages(&image).expect("image.json lists its languages");
    assert_eq!(held, ["bash", "python", "node", "lua", "tcl"]);

    let state = state_dir("debian");
    let file = file.to_str().expect("a UTF-8 path");
    let packages = packages.to_str().expect("a UTF-8 path");
    let more = ["--languages", file, "--packages-dir", packages];
    let runner = vm_runner_on(&image, 1, &state, &more);
    wait_available(&runner).await;
    let health = runner.health().await;
    assert_eq!(common::language_names(&health), held, "{health}");
    for lang in ["lua", "tcl"] {
        let hello = common::debian_programs::DEBIAN
            .iter()
            .find(|p| p.lang == lang)
            .expect("its programs");
        let out = run_bounded(&runner, lang, hello.hello, 20_000).await;
        assert_eq!(stdout(&out), format!("hello {lang}\n0\n"), "{out}");
        assert_eq!(exit_code(&out), 3, "{out}");
    }
    let (status, refused) = runner
        .post(&serde_json::json!({"lang": "perl", "code": "print 1;"}))
        .await;
    assert_eq!(status, 400, "{refused}");
    assert!(refused.to_string().contains("lua, tcl"), "{refused}");
    let status = runner.stop();
    assert!(status.success(), "{status}");
    assert!(
        qemu_processes(&state).is_empty(),
        "the runner's VMs are gone"
    );
}

use super::*;
use std::io::Write;

fn context() -> Context {
    Context {
        memory_mb: 256,
        packages: None,
    }
}

fn file(text: &str) -> tempfile::NamedTempFile {
    let mut file = tempfile::NamedTempFile::new().unwrap();
    file.write_all(text.as_bytes()).unwrap();
    file
}

/// The built-in rows' names, in order.
const BUILTIN: &str = "bash python node typescript c cpp go java";

#[test]
fn the_built_in_rows_come_first_then_debian_s() {
    let rows = Languages::rows(None).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names[..8].join(" "), BUILTIN);
    assert!(rows[..8].iter().all(|r| r.origin == Origin::Builtin));
    let debian = &rows[8..];
    assert!(debian.len() >= 24, "{names:?}");
    assert!(debian.iter().all(|r| r.origin == Origin::Debian));
    for row in debian {
        assert!(!row.requires.is_empty(), "{}: its toolchain", row.name);
        assert!(!row.version.is_empty(), "{}: its version", row.name);
        assert!(
            !row.debian_packages.is_empty(),
            "{}: its packages",
            row.name
        );
    }
    for name in [
        "rust",
        "ruby",
        "csharp",
        "haskell",
        "sql",
        "commonlisp",
        "bc",
    ] {
        assert!(names.contains(&name), "{name}: {names:?}");
    }
}

#[test]
fn an_operator_file_can_leave_debian_s_rows_out() {
    let operator = file("debian = false\n");
    let rows = Languages::rows(Some(operator.path())).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(names.join(" "), BUILTIN);
    let operator = file("debian = true\nremove = [\"ruby\"]\n");
    let rows = Languages::rows(Some(operator.path())).unwrap();
    assert!(rows.iter().any(|r| r.name.as_str() == "rust"));
    assert!(!rows.iter().any(|r| r.name.as_str() == "ruby"));
}

#[test]
fn an_operator_file_adds_replaces_and_removes_rows() {
    let operator = file(
        r#"
remove = ["go", "java"]

[[language]]
name = "perl"
file = "main.pl"
run = ["perl", "{file}"]
requires = ["/usr/bin/perl"]

[[language]]
name = "c"
file = "prog.c"
compile = ["gcc", "-O0", "-o", "{build}/prog", "{file}"]
run = ["{build}/prog"]
"#,
    );
    let rows = Languages::rows(Some(operator.path())).unwrap();
    let names: Vec<&str> = rows.iter().map(|r| r.name.as_str()).collect();
    assert_eq!(
        names[..6],
        ["bash", "python", "node", "typescript", "c", "cpp"]
    );
    assert!(
        !names.contains(&"go") && !names.contains(&"java"),
        "{names:?}"
    );
    // Debian's perl is replaced where it stands, by the operator's.
    let perl: Vec<&Row> = rows.iter().filter(|r| r.name.as_str() == "perl").collect();
    assert_eq!(perl.len(), 1);
    assert_eq!(perl[0].origin, Origin::Operator);
    assert_eq!(perl[0].version, Vec::<String>::new());
    let c = rows.iter().find(|r| r.name.as_str() == "c").unwrap();
    assert_eq!(c.origin, Origin::Operator);
    assert_eq!(c.file, "prog.c");
    let language = c.language("gcc 12".into(), &context());
    assert_eq!(
        language.info.compile.as_deref(),
        Some("gcc -O0 -o ./prog prog.c")
    );
    assert_eq!(language.info.run, "./prog");
    assert_eq!(language.recipe.compile_timeout_ms, 30_000);
}

#[test]
fn bad_files_are_refused_with_the_reason() {
    for (text, says) in [
        ("[[language]]\nname = \"C++\"\nfile = \"a\"\nrun = [\"x\"]", "not a language name"),
        ("[[language]]\nname = \"x\"\nfile = \"../a\"\nrun = [\"x\"]", "plain file name"),
        ("[[language]]\nname = \"x\"\nfile = \"a\"", "run command or a loader"),
        ("[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\nsurprise = 1", "unknown field"),
        ("remove = [\"klingon\"]", "no language klingon"),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\nshare = [\"/proc/self\"]",
            "share: /proc/self",
        ),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\nshare = [\"/etc/../home/sandbox\"]",
            "share: /etc/../home",
        ),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\nshare = [\"etc/ssl\"]",
            "share: etc/ssl",
        ),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\nshare = [\"/\"]",
            "share: /",
        ),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nloader = { kind = \"node\", command = [\"node\"] }",
            "{loader}",
        ),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\n[[language]]\nname = \"x\"\nfile = \"b\"\nrun = [\"y\"]",
            "twice",
        ),
        (
            "[[language]]\nname = \"x\"\nfile = \"a\"\nrun = [\"x\"]\nmemory_mb = 0",
            "memory_mb must be between 1 and 65536",
        ),
    ] {
        let operator = file(text);
        let error = Languages::rows(Some(operator.path())).unwrap_err().to_string();
        assert!(error.contains(says), "{text}: {error}");
    }
    let missing = Languages::rows(Some(Path::new("/nonexistent/languages.toml")));
    assert!(matches!(missing, Err(LanguagesError::Read { .. })));
}

#[test]
fn a_language_whose_toolchain_is_missing_is_left_out() {
    let operator = file(
        r#"
debian = false
remove = ["bash", "python", "node", "typescript", "c", "cpp", "go", "java"]

[[language]]
name = "here"
file = "main.sh"
run = ["sh", "{file}"]
requires = ["/bin/sh"]
version = ["sh", "-c", "echo; echo 'sh 1.0'"]

[[language]]
name = "gone"
file = "main.x"
run = ["x", "{file}"]
requires = ["/nonexistent/x"]

[[language]]
name = "failing"
file = "main.x"
run = ["sh", "{file}"]
version = ["sh", "-c", "echo broken >&2; exit 3"]

[[language]]
name = "set"
file = "main.x"
run = ["sh", "{file}"]
requires = ["{packages}/node"]
"#,
    );
    let languages = Languages::load(Some(operator.path()), &context()).unwrap();
    assert_eq!(languages.names(), ["here"]);
    assert_eq!(languages.get("here").unwrap().info.version, "sh 1.0");
    let unknown = languages.get("gone").unwrap_err().to_string();
    assert_eq!(
        unknown,
        "unknown language \"gone\": this runner offers here"
    );
}

#[test]
fn nothing_to_offer_is_an_error() {
    let operator = file(
        "debian = false\nremove = [\"bash\", \"python\", \"node\", \"typescript\", \"c\", \"cpp\", \"go\", \"java\"]",
    );
    let error = Languages::load(Some(operator.path()), &context()).unwrap_err();
    assert!(matches!(error, LanguagesError::Empty(_)), "{error}");
}

#[test]
fn placeholders_are_filled_for_the_sandbox() {
    let rows = Languages::rows(None).unwrap();
    let java = rows.iter().find(|r| r.name.as_str() == "java").unwrap();
    let language = java.language("17".into(), &context());
    let command = &language.recipe.loader.as_ref().unwrap().command;
    assert!(
        command.contains(&"-XX:MaxRAM=256m".to_owned()),
        "{command:?}"
    );
    assert!(language.info.warm && !language.info.keeps_state);
    let ts = rows
        .iter()
        .find(|r| r.name.as_str() == "typescript")
        .unwrap();
    let context = Context {
        memory_mb: 256,
        packages: Some("/store/sets/k".into()),
    };
    assert_eq!(
        Row::on_host(&ts.requires[1], &context).unwrap(),
        "/store/sets/k/node/node_modules/typescript/package.json"
    );
}

#[test]
fn health_shows_commands_as_typed_in_the_program_s_folder_without_placeholders() {
    for row in Languages::rows(None).unwrap() {
        let info = row.language("1".into(), &context()).info;
        for shown in info.compile.iter().chain([&info.run]) {
            for placeholder in ["{file}", "{build}", "{memory_mb}", "{packages}"] {
                assert!(!shown.contains(placeholder), "{}: {shown}", row.name);
            }
        }
    }
    let rows = Languages::rows(None).unwrap();
    let info = |name: &str| {
        let row = rows.iter().find(|r| r.name.as_str() == name).unwrap();
        row.language("1".into(), &context()).info
    };
    assert_eq!(
        info("fortran").compile.unwrap(),
        "gfortran -O2 -J . -o ./main main.f90"
    );
    assert!(info("commonlisp")
        .run
        .contains("--dynamic-space-size 256MB"));
}

#[test]
fn a_row_s_own_memory_only_ever_raises_the_sandbox_s_and_vms_leave_it_out() {
    let operator = file(
        r#"
[[language]]
name = "big"
file = "Main.java"
loader = { kind = "java", command = ["java", "-XX:MaxRAM={memory_mb}m", "{loader_file}"] }
memory_mb = 1024

[[language]]
name = "small"
file = "main.sh"
run = ["sh", "{file}"]
memory_mb = 64
"#,
    );
    let mut languages = Languages::load(Some(operator.path()), &context()).unwrap();
    let big = languages.get("big").unwrap();
    assert_eq!(big.recipe.memory_mb, Some(1024));
    assert_eq!(big.info.memory_mb, Some(1024));
    let command = &big.recipe.loader.as_ref().unwrap().command;
    assert!(
        command.contains(&"-XX:MaxRAM=1024m".to_owned()),
        "{command:?}"
    );
    let small = languages.get("small").unwrap();
    assert_eq!(small.recipe.memory_mb, None, "a row cannot lower the limit");
    assert_eq!(small.info.memory_mb, Some(256));
    let bash = languages.get("bash").unwrap();
    assert_eq!(
        (bash.recipe.memory_mb, bash.info.memory_mb),
        (None, Some(256))
    );
    languages.without_own_memory().unwrap();
    assert!(
        languages.get("big").is_err(),
        "a VM's memory is set at boot"
    );
    assert!(languages.get("small").is_ok());
}

#[test]
fn a_vm_image_without_a_toolchain_narrows_the_offer() {
    let operator = file(
        r#"
debian = false
remove = ["bash", "python", "node", "typescript", "c", "cpp", "go", "java"]

[[language]]
name = "one"
file = "main.sh"
run = ["sh", "{file}"]

[[language]]
name = "two"
file = "main.sh"
run = ["sh", "{file}"]
"#,
    );
    let mut languages = Languages::load(Some(operator.path()), &context()).unwrap();
    languages
        .keep_only(&["two".to_owned()], "the image")
        .unwrap();
    assert_eq!(languages.names(), ["two"]);
    let none = languages.keep_only(&["three".to_owned()], "the image");
    assert!(matches!(none, Err(LanguagesError::Empty(_))));
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("image.json"),
        r#"{"languages": ["c", "go"]}"#,
    )
    .unwrap();
    assert_eq!(
        sandbox_image::languages(dir.path()),
        Some(vec!["c".to_owned(), "go".to_owned()])
    );
    assert_eq!(sandbox_image::languages(Path::new("/nonexistent")), None);
}

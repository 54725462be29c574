//! (a), the direct command on the host: a folder per language holding its program (and
//! the TypeScript command's `transpile.js`), a home, and Go's build cache, kept across
//! runs (warm, as on a developer's machine, once the warm-up round has filled it).

use super::hellos::{Hello, ROOT};
use anyhow::{ensure, Context};
use sandbox_protocol::language::{BUILD, FILE};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use tokio::process::Command;

/// The direct TypeScript command's program: what `ts-node --transpile-only` does, and
/// what the runner's TypeScript loader does, in a fresh node. Types are stripped by the
/// set's compiler (`transpileModule`, the loader's options, no type check), then the
/// JavaScript runs as node runs a CommonJS main module.
const TRANSPILE_JS: &str = r#"const fs = require('fs');
const path = require('path');
const Module = require('module');
const ts = require('typescript');
const file = path.resolve(process.argv[2]);
const { outputText } = ts.transpileModule(fs.readFileSync(file, 'utf8'), {
  fileName: file,
  compilerOptions: {
    module: ts.ModuleKind.CommonJS,
    target: ts.ScriptTarget.ES2022,
    esModuleInterop: true,
  },
});
const main = new Module(file, null);
main.filename = file;
main.paths = Module._nodeModulePaths(path.dirname(file));
process.argv[1] = file;
main._compile(outputText, file);
"#;

/// The direct commands' folders.
pub struct Direct {
    root: PathBuf,
}

impl Direct {
    /// Makes the folders and writes every program of `hellos`.
    pub fn new(hellos: &[Hello]) -> anyhow::Result<Direct> {
        let root = std::env::temp_dir().join(format!("bench-languages-{}", std::process::id()));
        let direct = Direct { root };
        if let Err(e) = direct.write_programs(hellos) {
            let _ = direct.remove();
            return Err(e);
        }
        Ok(direct)
    }

    fn write_programs(&self, hellos: &[Hello]) -> anyhow::Result<()> {
        create_dir(&self.root.join("home"))?;
        for hello in hellos {
            let dir = self.root.join(&hello.name);
            create_dir(&dir)?;
            write(&dir.join(&hello.file), &hello.code)?;
        }
        write(&self.root.join("typescript/transpile.js"), TRANSPILE_JS)
    }

    /// Runs the steps in the language's folder, its build folder emptied first, with the
    /// agent's clean environment, the bench's home and the language's variables; the
    /// last must print `expected`.
    pub async fn run(&self, hello: &Hello, expected: &str) -> anyhow::Result<()> {
        let dir = self.root.join(&hello.name);
        let build = dir.join("build");
        if build.exists() {
            std::fs::remove_dir_all(&build)
                .with_context(|| format!("emptying {}", build.display()))?;
        }
        create_dir(&build)?;
        let last = hello.direct.len().saturating_sub(1);
        for (i, step) in hello.direct.iter().enumerate() {
            let output = self.step(hello, &dir, step).await?;
            let stdout = String::from_utf8_lossy(&output.stdout);
            ensure!(
                output.status.success(),
                "{} exited with {}; stdout: {stdout}; stderr: {}",
                step.join(" "),
                output.status,
                String::from_utf8_lossy(&output.stderr)
            );
            ensure!(i < last || stdout == expected, "printed {stdout:?}");
        }
        Ok(())
    }

    async fn step(
        &self,
        hello: &Hello,
        dir: &Path,
        step: &[String],
    ) -> anyhow::Result<std::process::Output> {
        let fill = Placeholders::new(&self.root, dir, hello);
        let (program, args) = step.split_first().context("an empty direct step")?;
        let program = fill.apply(program);
        // `./main` is the folder's: spawned by its full path.
        let program = match program.strip_prefix("./") {
            Some(local) => dir.join(local),
            None => PathBuf::from(program),
        };
        Command::new(&program)
            .args(args.iter().map(|a| fill.apply(a)))
            .current_dir(dir)
            .env_clear()
            .envs(crate::cases::Case::clean_env())
            .env("HOME", self.root.join("home"))
            .envs(hello.env.iter().map(|(k, v)| (k, fill.apply(v))))
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output()
            .await
            .with_context(|| format!("spawning {}", program.display()))
    }

    /// Removes every folder.
    pub fn remove(&self) -> anyhow::Result<()> {
        std::fs::remove_dir_all(&self.root)
            .with_context(|| format!("removing {}", self.root.display()))
    }
}

/// What the placeholders of a direct command stand for.
struct Placeholders {
    root: String,
    file: String,
    build: String,
}

impl Placeholders {
    fn new(root: &Path, dir: &Path, hello: &Hello) -> Placeholders {
        Placeholders {
            root: root.to_string_lossy().into_owned(),
            file: dir.join(&hello.file).to_string_lossy().into_owned(),
            build: dir.join("build").to_string_lossy().into_owned(),
        }
    }

    fn apply(&self, arg: &str) -> String {
        arg.replace(ROOT, &self.root)
            .replace(FILE, &self.file)
            .replace(BUILD, &self.build)
    }
}

fn create_dir(dir: &Path) -> anyhow::Result<()> {
    std::fs::create_dir_all(dir).with_context(|| format!("creating {}", dir.display()))
}

fn write(path: &Path, text: &str) -> anyhow::Result<()> {
    std::fs::write(path, text).with_context(|| format!("writing {}", path.display()))
}

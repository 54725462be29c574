//! Tools called from code ([`sandbox_protocol::tools`]): the sandbox's side. For a job
//! that offers tools ([`Job::tools`], which only a streamed job carries), the agent
//!
//! 1. writes the `tools` modules for the offer in the sandbox's tools folder
//!    ([`Modules`], [`TOOLS`]): Python's `python/tools.py` (`python.rs`), whose folder
//!    goes on the program's import path, and Node's package `node_modules/tools/`
//!    (`node.rs`, `typescript.rs`), which Node finds through the link
//!    [`HOME_NODE_MODULES`] (TypeScript's loader transpiles `import` to `require`); a
//!    job without tools removes them, so a session's next program finds none;
//! 2. listens on the socket there while the program runs and relays each call to the
//!    runner and its answer back ([`Relay`], `relay.rs`, one connection a call,
//!    `connection.rs`), from the thread that holds the channel, as the watch loop
//!    polls (`watch.rs`).
//!
//! The folder is a tmpfs of the sandbox's own that the jail makes, sandbox root's:
//! a program reads the modules and connects to the socket, and can write nothing
//! there. The modules hold names, descriptions and input schemas only: no address, no
//! credential. Every text of the offer goes into them as a string literal
//! (`schema::literal`), never as code.
//!
//! [`Job::tools`]: sandbox_protocol::agent::Job::tools
//! [`TOOLS`]: sandbox_jail::layout::TOOLS
//! [`HOME_NODE_MODULES`]: sandbox_jail::layout::HOME_NODE_MODULES

mod connection;
mod node;
mod python;
mod relay;
mod schema;
mod typescript;

pub(crate) use relay::{Relay, Slot};

use sandbox_jail::layout::TOOLS;
use sandbox_protocol::tools::ToolsOffer;
use std::fs;
use std::io::{self, Write};
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};

/// Where the modules and the socket are: the sandbox's tools folder, or (in tests) any.
#[derive(Debug, Clone)]
pub(crate) struct Folder {
    root: PathBuf,
}

impl Folder {
    /// The sandbox's, [`TOOLS`].
    pub(crate) fn sandbox() -> Folder {
        Folder { root: TOOLS.into() }
    }

    /// Python's module folder, which a job with tools puts on the import path.
    pub(crate) fn python(&self) -> PathBuf {
        self.root.join("python")
    }

    /// Node's package.
    fn package(&self) -> PathBuf {
        self.root.join("node_modules").join("tools")
    }

    /// The agent's socket (in the sandbox's folder,
    /// [`SOCKET`](sandbox_protocol::tools::SOCKET)).
    pub(crate) fn socket(&self) -> PathBuf {
        self.root.join("socket")
    }
}

/// The modules as the agent last wrote them, kept between a session's jobs.
#[derive(Debug)]
pub(crate) struct Modules {
    folder: Folder,
    written: Option<ToolsOffer>,
    /// Counts the changes of the modules: a session's resident interpreter forgets its
    /// `tools` when it differs from the one it last saw.
    generation: u64,
    /// Counts the jobs that offered tools: a call's id is `<run>-<n>`, unique for the
    /// agent's life (a reply that comes late is never taken for a later run's).
    runs: u64,
}

impl Default for Modules {
    fn default() -> Self {
        Modules::in_folder(Folder::sandbox())
    }
}

impl Modules {
    /// Modules written in `folder`.
    pub(crate) fn in_folder(folder: Folder) -> Modules {
        Modules {
            folder,
            written: None,
            generation: 0,
            runs: 0,
        }
    }

    /// Where they are.
    pub(crate) fn folder(&self) -> &Folder {
        &self.folder
    }

    /// The number of the modules' current state (0: never written).
    pub(crate) fn generation(&self) -> u64 {
        self.generation
    }

    /// Makes the modules say `offer` (none: removes them), unless they already do.
    pub(crate) fn write(&mut self, offer: Option<&ToolsOffer>) -> io::Result<()> {
        if self.written.as_ref() == offer {
            return Ok(());
        }
        self.written = None;
        self.generation += 1;
        match offer {
            Some(offer) => self.write_files(offer)?,
            None => self.remove_files()?,
        }
        self.written = offer.cloned();
        Ok(())
    }

    /// The relay of a job's calls, listening on the socket; the job is the next run.
    pub(crate) fn relay(&mut self, offer: &ToolsOffer) -> io::Result<Relay> {
        self.runs += 1;
        Relay::open(offer, &self.folder.socket(), self.runs)
    }

    fn write_files(&self, offer: &ToolsOffer) -> io::Result<()> {
        let socket = self.folder.socket();
        let socket = socket.to_string_lossy();
        make_folder(&self.folder.python())?;
        write_file(
            &self.folder.python().join("tools.py"),
            &python::module(offer, &socket),
        )?;
        let package = self.folder.package();
        make_folder(&package)?;
        let files = [
            ("package.json", node::package_json()),
            ("index.js", node::index_js(offer, &socket)),
            ("index.mjs", node::index_mjs(offer)),
            ("index.d.ts", typescript::index_d_ts(offer)),
        ];
        for (name, text) in files {
            write_file(&package.join(name), &text)?;
        }
        Ok(())
    }

    fn remove_files(&self) -> io::Result<()> {
        let gone = |result: io::Result<()>| match result {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        };
        gone(fs::remove_file(self.folder.python().join("tools.py")))?;
        gone(fs::remove_dir_all(self.folder.package()))
    }
}

/// Writes `text` to `path` whole (a file beside it renamed over it: a program of the
/// session that imports meanwhile reads the old module or the new, never half of one),
/// readable by all.
fn write_file(path: &Path, text: &str) -> io::Result<()> {
    let mut next = path.as_os_str().to_owned();
    next.push(".next");
    let next = PathBuf::from(next);
    let mut file = fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o644)
        .open(&next)?;
    file.set_permissions(fs::Permissions::from_mode(0o644))?;
    file.write_all(text.as_bytes())?;
    drop(file);
    fs::rename(&next, path)
}

/// Makes the folder `path` (readable by all) if it is not there.
fn make_folder(path: &Path) -> io::Result<()> {
    match fs::create_dir(path) {
        Err(e) if e.kind() != io::ErrorKind::AlreadyExists => Err(e),
        _ => fs::set_permissions(path, fs::Permissions::from_mode(0o755)),
    }
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod places {
    use super::*;
    use sandbox_jail::layout::{TOOLS_NODE_MODULES, TOOLS_PYTHON};
    use sandbox_protocol::tools::{MODULES, SOCKET};

    /// The jail's folders and the protocol's names are one place.
    #[test]
    fn the_sandbox_folder_is_where_the_protocol_says() {
        let folder = Folder::sandbox();
        assert_eq!(TOOLS, MODULES);
        assert_eq!(folder.socket(), Path::new(SOCKET));
        assert_eq!(folder.python(), Path::new(TOOLS_PYTHON));
        assert_eq!(
            folder.package().parent(),
            Some(Path::new(TOOLS_NODE_MODULES))
        );
    }
}

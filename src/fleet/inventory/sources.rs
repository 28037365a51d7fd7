//! Inventory sources as ansible-core's `InventoryManager` reads them: files (tried by the
//! `script`, `yaml` and `ini` plugins in turn), directories, host lists, and the
//! `group_vars/`/`host_vars/` beside each source (the `host_group_vars` vars plugin).

use std::{
    collections::{BTreeMap, HashSet},
    ffi::OsString,
    fs,
    path::{Path, PathBuf},
    time::Duration,
};

use super::{AdjacentVars, Inventory, SCRIPT_TIMEOUT, UNGROUPED, address, document, ini};
use crate::error::{Error, Result};

/// How sources are read; the script timeout is shorter in tests.
#[derive(Debug, Clone)]
pub(super) struct ReadOptions {
    pub(super) script_timeout: Duration,
}

impl Default for ReadOptions {
    fn default() -> Self {
        ReadOptions {
            script_timeout: SCRIPT_TIMEOUT,
        }
    }
}

/// ansible-core 2.19's `INVENTORY_IGNORE_EXTS`: directory entries with these endings are
/// not inventory sources (`.ini` is no longer among them since 2.19).
const IGNORED_ENDINGS: &[&str] = &[
    ".pyc", ".pyo", ".swp", ".bak", "~", ".rpm", ".md", ".txt", ".rst", ".orig", ".cfg", ".retry",
];

/// `IGNORED_ALWAYS`: directory entries that are never inventory sources.
const IGNORED_NAMES: &[&str] = &["host_vars", "group_vars", "vars_plugins"];

/// The extensions the yaml plugin (and the vars plugin) read, besides none.
const YAML_EXTENSIONS: &[&str] = &[".yml", ".yaml", ".json"];

/// Reads `paths` in order into one inventory, then each one's `group_vars/` and
/// `host_vars/`.
pub(super) fn read<P: AsRef<Path>>(paths: &[P], options: &ReadOptions) -> Result<Inventory> {
    if paths.is_empty() {
        return Err(invalid("no inventory source given".to_owned()));
    }
    let mut inventory = Inventory::new();
    for path in paths {
        source(&mut inventory, path.as_ref(), options).map_err(invalid)?;
    }
    inventory.finish()?;
    for path in paths {
        adjacent_vars(&mut inventory, path.as_ref()).map_err(invalid)?;
    }
    Ok(inventory)
}

fn source(inventory: &mut Inventory, path: &Path, options: &ReadOptions) -> Result<(), String> {
    match fs::metadata(path) {
        Ok(meta) if meta.is_dir() => directory(inventory, path, options),
        Ok(meta) if meta.is_file() => file(inventory, path, &meta, options)
            .map_err(|e| format!("inventory {}: {e}", path.display())),
        Ok(_) => Err(format!(
            "inventory {}: not a file or a directory",
            path.display()
        )),
        Err(_) if path.to_str().is_some_and(|p| p.contains(',')) => {
            host_list(inventory, path.to_str().unwrap_or_default())
                .map_err(|e| format!("host list `{}`: {e}", path.display()))
        }
        Err(e) => Err(format!("cannot read inventory {}: {e}", path.display())),
    }
}

/// Every entry of a directory, in name order, but those Ansible ignores.
fn directory(inventory: &mut Inventory, dir: &Path, options: &ReadOptions) -> Result<(), String> {
    let mut names: Vec<OsString> = fs::read_dir(dir)
        .and_then(|entries| entries.map(|e| e.map(|e| e.file_name())).collect())
        .map_err(|e| format!("cannot read inventory directory {}: {e}", dir.display()))?;
    names.sort();
    for name in names {
        let text = name.to_string_lossy();
        if text.starts_with('.')
            || IGNORED_NAMES.contains(&text.as_ref())
            || IGNORED_ENDINGS.iter().any(|e| text.ends_with(e))
        {
            continue;
        }
        source(inventory, &dir.join(&name), options)?;
    }
    Ok(())
}

/// Python's `os.path.splitext(name)[1]`: from the last dot that does not start the name.
fn extension(name: &str) -> &str {
    let stem_start = name.len() - name.trim_start_matches('.').len();
    match name.rfind('.') {
        Some(dot) if dot > stem_start => &name[dot..],
        _ => "",
    }
}

/// One file: a script when it has an execute bit and starts like one; else YAML (by
/// extension) then INI, as Ansible's plugins try it.
fn file(
    inventory: &mut Inventory,
    path: &Path,
    meta: &fs::Metadata,
    options: &ReadOptions,
) -> Result<(), String> {
    if is_script(path, meta) {
        return script(inventory, path, options);
    }
    let name = path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned())
        .unwrap_or_default();
    let extension = extension(&name);
    if extension == ".toml" {
        return Err("TOML inventories are not supported".to_owned());
    }
    let bytes = fs::read(path).map_err(|e| format!("cannot read it: {e}"))?;
    let text = String::from_utf8(bytes).map_err(|_| "it is not UTF-8 text".to_owned())?;
    if text.starts_with("$ANSIBLE_VAULT;") {
        return Err("it is vault-encrypted: Ansible Vault is not supported".to_owned());
    }
    let yaml = if extension.is_empty() || YAML_EXTENSIONS.contains(&extension) {
        match document::parse_inventory_text(inventory, &text) {
            Ok(()) => return Ok(()),
            Err(e) => Some(e),
        }
    } else {
        None
    };
    ini::parse(inventory, &text).map_err(|ini| match yaml {
        Some(yaml) => format!("neither a YAML inventory ({yaml}) nor an INI one ({ini})"),
        None => ini,
    })
}

/// A file with an execute bit that starts with `#!` or is an ELF binary. Other executable
/// files fail to run in Ansible too (which then parses them as YAML or INI); they are never
/// handed to a shell.
#[cfg(unix)]
fn is_script(path: &Path, meta: &fs::Metadata) -> bool {
    use std::{io::Read, os::unix::fs::PermissionsExt};
    if meta.permissions().mode() & 0o111 == 0 {
        return false;
    }
    let mut head = [0u8; 4];
    let read = fs::File::open(path)
        .and_then(|mut f| f.read(&mut head))
        .unwrap_or(0);
    head.get(..read)
        .is_some_and(|h| h.starts_with(b"#!") || h.starts_with(b"\x7fELF"))
}

#[cfg(not(unix))]
fn is_script(_path: &Path, _meta: &fs::Metadata) -> bool {
    false
}

/// What a script printed.
struct ScriptOutput {
    stdout: String,
    stderr: String,
}

/// An inventory script: `SCRIPT --list`, and `SCRIPT --host NAME` for every host when
/// the list has no `_meta`.
fn script(inventory: &mut Inventory, path: &Path, options: &ReadOptions) -> Result<(), String> {
    let program = std::path::absolute(path).map_err(|e| format!("cannot locate it: {e}"))?;
    let timeout = options.script_timeout;
    let list = run_script(&program, &["--list"], timeout)?;
    if !list.stderr.trim().is_empty() {
        inventory.warnings.push(format!(
            "inventory script {} wrote to its standard error: {}",
            path.display(),
            list.stderr.trim_end()
        ));
    }
    let mut fetch = |host: &str| run_script(&program, &["--host", host], timeout).map(|o| o.stdout);
    document::parse_list_json(inventory, &list.stdout, Some(&mut fetch))
        .map_err(|e| with_stderr(format!("`--list` output: {e}"), &list.stderr))
}

fn with_stderr(message: String, stderr: &str) -> String {
    let stderr = stderr.trim_end();
    if stderr.trim().is_empty() {
        message
    } else {
        format!("{message}; its standard error:\n{stderr}")
    }
}

/// At most this much of a script's standard error is kept for messages.
const STDERR_KEPT: usize = 64 * 1024;

/// Runs `program args` with no standard input, in its own process group, and waits for it
/// to exit and close its output, at most `timeout`: then the whole group is killed.
#[cfg(unix)]
fn run_script(program: &Path, args: &[&str], timeout: Duration) -> Result<ScriptOutput, String> {
    use std::{
        io::Read,
        os::unix::process::CommandExt,
        process::{Command, Stdio},
        sync::{Arc, Mutex, mpsc},
        time::Instant,
    };

    enum Event {
        Stdout(std::io::Result<Vec<u8>>),
        StderrClosed,
        Exited(std::io::Result<std::process::ExitStatus>),
    }

    let mut child = Command::new(program)
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .process_group(0)
        .spawn()
        .map_err(|e| format!("cannot run `{} {}`: {e}", program.display(), args.join(" ")))?;
    let group = rustix::process::Pid::from_child(&child);
    let (events, received) = mpsc::channel();
    let stderr_text = Arc::new(Mutex::new(Vec::new()));
    if let Some(mut stdout) = child.stdout.take() {
        let events = events.clone();
        std::thread::spawn(move || {
            let mut bytes = Vec::new();
            let result = stdout.read_to_end(&mut bytes).map(|_| bytes);
            events.send(Event::Stdout(result)).ok();
        });
    }
    if let Some(mut stderr) = child.stderr.take() {
        let events = events.clone();
        let kept = Arc::clone(&stderr_text);
        std::thread::spawn(move || {
            let mut chunk = [0u8; 8192];
            while let Ok(n @ 1..) = stderr.read(&mut chunk) {
                if let Ok(mut kept) = kept.lock()
                    && kept.len() < STDERR_KEPT
                {
                    kept.extend_from_slice(chunk.get(..n).unwrap_or_default());
                }
            }
            events.send(Event::StderrClosed).ok();
        });
    }
    std::thread::spawn(move || {
        events.send(Event::Exited(child.wait())).ok();
    });
    let stderr = || {
        stderr_text
            .lock()
            .map(|kept| String::from_utf8_lossy(&kept).into_owned())
            .unwrap_or_default()
    };
    let command = format!("`{} {}`", program.display(), args.join(" "));
    let deadline = Instant::now() + timeout;
    let (mut stdout, mut stderr_closed, mut status) = (None, false, None);
    while stdout.is_none() || !stderr_closed || status.is_none() {
        match received.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            Ok(Event::Stdout(result)) => {
                stdout = Some(result.map_err(|e| format!("reading {command}'s output: {e}"))?);
            }
            Ok(Event::StderrClosed) => stderr_closed = true,
            Ok(Event::Exited(result)) => {
                status = Some(result.map_err(|e| format!("waiting for {command}: {e}"))?);
            }
            Err(mpsc::RecvTimeoutError::Timeout) => {
                // The script and anything it started; the waiting thread reaps it.
                rustix::process::kill_process_group(group, rustix::process::Signal::KILL).ok();
                return Err(with_stderr(
                    format!("{command} did not finish within {timeout:?}: killed it"),
                    &stderr(),
                ));
            }
            Err(mpsc::RecvTimeoutError::Disconnected) => break,
        }
    }
    let stderr = stderr();
    match status {
        Some(status) if status.success() => {}
        Some(status) => return Err(with_stderr(format!("{command} failed ({status})"), &stderr)),
        None => return Err(with_stderr(format!("{command} vanished"), &stderr)),
    }
    let stdout = String::from_utf8(stdout.unwrap_or_default()).map_err(|_| {
        with_stderr(
            format!("{command} printed output that is not UTF-8"),
            &stderr,
        )
    })?;
    Ok(ScriptOutput { stdout, stderr })
}

#[cfg(not(unix))]
fn run_script(program: &Path, _args: &[&str], _timeout: Duration) -> Result<ScriptOutput, String> {
    Err(format!(
        "{}: inventory scripts are run on Unix only",
        program.display()
    ))
}

/// The `host_list` plugin: `web1,web2:2222,` (a source that is not a path and has a comma).
fn host_list(inventory: &mut Inventory, text: &str) -> Result<(), String> {
    for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        // `parse_address(allow_ranges=False)`: a range is not expanded but kept as the name.
        let (host, port) = match address::parse_address(entry)? {
            Some((host, port)) if !host.contains('[') => (host, port),
            _ => (entry.to_owned(), None),
        };
        if !inventory.host_index.contains_key(&host) {
            inventory.add_host(&host, Some(UNGROUPED), port.as_deref())?;
        }
    }
    Ok(())
}

/// `group_vars/` and `host_vars/` in the source's directory (the source itself when it is
/// a directory), for every group and host of the inventory.
fn adjacent_vars(inventory: &mut Inventory, source: &Path) -> Result<(), String> {
    let base = match fs::metadata(source) {
        Ok(meta) if meta.is_dir() => source.to_path_buf(),
        Ok(_) => match source.parent() {
            Some(parent) if !parent.as_os_str().is_empty() => parent.to_path_buf(),
            _ => PathBuf::from("."),
        },
        // A host list.
        Err(_) => return Ok(()),
    };
    let base = fs::canonicalize(&base).unwrap_or(base);
    let mut adjacent = AdjacentVars::default();
    for (subdirectory, groups) in [("group_vars", true), ("host_vars", false)] {
        let dir = base.join(subdirectory);
        match fs::metadata(&dir) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => {
                inventory.warnings.push(format!(
                    "found {subdirectory} that is not a directory, skipping: {}",
                    dir.display()
                ));
                continue;
            }
            Err(_) => continue,
        }
        let listing: HashSet<OsString> = fs::read_dir(&dir)
            .and_then(|entries| entries.map(|e| e.map(|e| e.file_name())).collect())
            .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
        let names: Vec<(usize, String)> = if groups {
            inventory
                .groups
                .iter()
                .map(|g| g.name.clone())
                .enumerate()
                .collect()
        } else {
            inventory.host_names.iter().cloned().enumerate().collect()
        };
        for (id, name) in names {
            // Ansible skips names that are paths (`/chroot/x` hosts).
            if name.starts_with('/') {
                continue;
            }
            let mut vars = BTreeMap::new();
            let files = vars_files(&dir, &listing, &name)?;
            if files.is_empty() {
                continue;
            }
            for file in files {
                let text = fs::read_to_string(&file)
                    .map_err(|e| format!("cannot read {}: {e}", file.display()))?;
                let more = document::parse_vars_file(&text)
                    .map_err(|e| format!("{}: {e}", file.display()))?;
                vars.extend(more);
            }
            if groups {
                adjacent.groups.insert(id, vars);
            } else {
                adjacent.hosts.insert(id, vars);
            }
        }
    }
    inventory.adjacent.push(adjacent);
    Ok(())
}

/// `DataLoader.find_vars_files`: the first of `NAME`, `NAME.yml`, `NAME.yaml`, `NAME.json`
/// that exists; a directory stands for the files in it.
fn vars_files(dir: &Path, listing: &HashSet<OsString>, name: &str) -> Result<Vec<PathBuf>, String> {
    // A name that is one plain entry is looked up in the listing, not with four `stat`s.
    let plain = !name.contains('/') && name != "." && name != "..";
    for suffix in ["", ".yml", ".yaml", ".json"] {
        let candidate = format!("{name}{suffix}");
        if plain && !listing.contains(&OsString::from(&candidate)) {
            continue;
        }
        let path = dir.join(&candidate);
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        return if meta.is_dir() {
            let mut found = Vec::new();
            directory_vars_files(&path, &mut found)?;
            Ok(found)
        } else {
            Ok(vec![path])
        };
    }
    Ok(Vec::new())
}

/// `DataLoader._get_dir_vars_files`: in name order, skipping hidden and `~` files; files
/// with a YAML extension or none; subdirectories without an extension, recursively.
fn directory_vars_files(dir: &Path, found: &mut Vec<PathBuf>) -> Result<(), String> {
    let mut names: Vec<OsString> = fs::read_dir(dir)
        .and_then(|entries| entries.map(|e| e.map(|e| e.file_name())).collect())
        .map_err(|e| format!("cannot read {}: {e}", dir.display()))?;
    names.sort();
    for name in names {
        let text = name.to_string_lossy();
        if text.starts_with('.') || text.ends_with('~') {
            continue;
        }
        let extension = extension(&text);
        let path = dir.join(&name);
        let Ok(meta) = fs::metadata(&path) else {
            continue;
        };
        if meta.is_dir() && extension.is_empty() {
            directory_vars_files(&path, found)?;
        } else if meta.is_file() && (extension.is_empty() || YAML_EXTENSIONS.contains(&extension)) {
            found.push(path);
        }
    }
    Ok(())
}

fn invalid(reason: String) -> Error {
    Error::InvalidInput { reason }
}

#[cfg(test)]
mod tests {
    use super::extension;

    #[test]
    fn extensions_like_splitext() {
        assert_eq!(extension("hosts.yml"), ".yml");
        assert_eq!(extension("a.b.ini"), ".ini");
        assert_eq!(extension("hosts"), "");
        assert_eq!(extension(".hidden"), "");
        assert_eq!(extension("..x"), "");
        assert_eq!(extension("a."), ".");
    }
}

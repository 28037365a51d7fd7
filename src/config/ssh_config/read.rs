//! Reading a configuration: the file, the files it includes (globs, nesting, permissions,
//! the limits on what one configuration may read), and each line into an entry under the
//! conditions around it.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use crate::error::{Error, Result};

use super::lex::split_line;
use super::matching::{Condition, Scope, host_patterns};
use super::setting::Setting;
use super::tokens::tilde_rest;
use super::{Entry, Origin, SshConfig};

/// Includes nested deeper than this are refused (OpenSSH's `READCONF_MAX_DEPTH`).
const MAX_INCLUDE_DEPTH: usize = 16;

/// One configuration reads at most this many files through `Include` (the same file
/// included from several blocks counts each time). OpenSSH has no such limit, but also no
/// need of one: it reads the file once per `ssh` run, where a library may resolve many
/// hosts from hostile or generated files. Nesting alone (16 levels with two `Include`s each)
/// would otherwise read 2¹⁶ files.
const MAX_INCLUDED_FILES: usize = 1024;

/// One configuration reads at most this many bytes through `Include`, in all.
const MAX_INCLUDED_BYTES: usize = 64 * 1024 * 1024;

impl SshConfig {
    /// Reads one file, the main one or an included one, into entries under `scope`,
    /// counting it against what `reading` allows.
    pub(super) fn read_file(
        &mut self,
        path: &Path,
        scope: Option<Arc<Scope>>,
        check_permissions: bool,
        reading: &mut Reading,
    ) -> Result<()> {
        let fail = |reason: String| Error::SshConfig {
            path: path.to_path_buf(),
            line: None,
            reason,
        };
        let metadata = std::fs::metadata(path).map_err(|e| fail(e.to_string()))?;
        if check_permissions && writable_by_others(&metadata) {
            return Err(fail(
                "bad permissions: writable by group or others (ssh refuses it too)".to_owned(),
            ));
        }
        let text = std::fs::read_to_string(path).map_err(|e| fail(e.to_string()))?;
        reading.bytes = reading.bytes.saturating_add(text.len());
        if reading.bytes > MAX_INCLUDED_BYTES {
            return Err(fail(format!(
                "Include reads more than {MAX_INCLUDED_BYTES} bytes in all"
            )));
        }
        reading.stack.push(canonical(path));
        let read = self.read_text(Arc::from(path), &text, scope, reading);
        reading.stack.pop();
        read
    }

    fn read_text(
        &mut self,
        file: Arc<Path>,
        text: &str,
        outer: Option<Arc<Scope>>,
        reading: &mut Reading,
    ) -> Result<()> {
        let mut scope = outer.clone();
        for (index, line) in text.lines().enumerate() {
            let origin = Origin {
                file: file.clone(),
                line: index + 1,
            };
            let Some((keyword, args)) = split_line(line).map_err(|e| origin.error(e))? else {
                continue;
            };
            match keyword.to_ascii_lowercase().as_str() {
                "host" => {
                    let patterns = host_patterns(args).map_err(|e| origin.error(e))?;
                    scope = Some(self.nested(&outer, Condition::Host(patterns)));
                }
                "match" => {
                    self.push(&outer, origin, Setting::Ignored(keyword));
                    scope = Some(self.nested(&outer, Condition::Never));
                }
                "include" => self.include(&args, &scope, reading, &origin)?,
                lower => {
                    let setting =
                        Setting::parse(lower, keyword, args).map_err(|e| origin.error(e))?;
                    self.push(&scope, origin, setting);
                }
            }
        }
        Ok(())
    }

    fn nested(&mut self, outer: &Option<Arc<Scope>>, condition: Condition) -> Arc<Scope> {
        let id = self.scopes;
        self.scopes += 1;
        Arc::new(Scope {
            id,
            condition,
            outer: outer.clone(),
        })
    }

    fn push(&mut self, scope: &Option<Arc<Scope>>, origin: Origin, setting: Setting) {
        self.entries.push(Entry {
            scope: scope.clone(),
            origin,
            setting,
        });
    }

    fn include(
        &mut self,
        args: &[String],
        scope: &Option<Arc<Scope>>,
        reading: &mut Reading,
        origin: &Origin,
    ) -> Result<()> {
        if args.is_empty() {
            return Err(origin.error("Include needs at least one file"));
        }
        if reading.stack.len() >= MAX_INCLUDE_DEPTH {
            return Err(origin.error("Include nested too deeply (a loop?)"));
        }
        for arg in args {
            for path in self.include_matches(arg).map_err(|e| origin.error(e))? {
                // A file that includes one it is being read from recurses until the depth
                // limit, as in OpenSSH, where it is the same error; saying so at once spares
                // reading it 16 times over (with every sibling `Include` at every level).
                if reading.stack.contains(&canonical(&path)) {
                    return Err(origin.error(format!(
                        "Include nested too deeply: {} includes itself (directly or through \
                         other files)",
                        path.display()
                    )));
                }
                reading.files += 1;
                if reading.files > MAX_INCLUDED_FILES {
                    return Err(origin.error(format!(
                        "Include reads more than {MAX_INCLUDED_FILES} files in all"
                    )));
                }
                self.read_file(&path, scope.clone(), true, reading)?;
            }
        }
        Ok(())
    }

    /// The files an `Include` argument names, sorted; none when the pattern matches nothing.
    fn include_matches(&self, arg: &str) -> std::result::Result<Vec<PathBuf>, String> {
        let home = self.home.as_deref();
        let pattern = if let Some(rest) = tilde_rest(arg) {
            let home = home.ok_or("`~` needs a home directory")?;
            format!("{}{rest}", glob::Pattern::escape(&home.to_string_lossy()))
        } else if arg.starts_with('/') {
            arg.to_owned()
        } else {
            let ssh_dir = home.ok_or("a relative Include needs a home directory")?;
            let ssh_dir = ssh_dir.join(".ssh");
            format!(
                "{}/{arg}",
                glob::Pattern::escape(&ssh_dir.to_string_lossy())
            )
        };
        // A plain name needs no directory listing: 5,000 of them on one line took 0.6 s
        // through `glob`.
        if !pattern.contains(['*', '?', '[']) {
            let path = PathBuf::from(pattern);
            return Ok(if path.exists() && !path.is_dir() {
                vec![path]
            } else {
                Vec::new()
            });
        }
        let options = glob::MatchOptions {
            case_sensitive: true,
            require_literal_separator: true,
            require_literal_leading_dot: true,
        };
        let matches = glob::glob_with(&pattern, options).map_err(|e| e.to_string())?;
        let mut files = Vec::new();
        for entry in matches {
            let path = entry.map_err(|e| e.to_string())?;
            if !path.is_dir() {
                files.push(path);
            }
        }
        files.sort();
        Ok(files)
    }
}

/// `path` with symbolic links and `..` resolved, to recognise a file included again; as
/// given when that fails (the read reports why).
fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// What reading one configuration has used so far.
#[derive(Default)]
pub(super) struct Reading {
    /// The files being read, outermost first.
    stack: Vec<PathBuf>,
    /// Files read through `Include`.
    files: usize,
    /// Bytes read, from every file.
    bytes: usize,
}

#[cfg(unix)]
fn writable_by_others(metadata: &std::fs::Metadata) -> bool {
    use std::os::unix::fs::MetadataExt;
    metadata.mode() & 0o022 != 0
}

#[cfg(not(unix))]
fn writable_by_others(_: &std::fs::Metadata) -> bool {
    false
}

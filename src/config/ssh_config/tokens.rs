//! Expanding values as `ssh` does: `~`, `${VAR}` and `%` tokens, and the local facts the
//! tokens stand for (login name, uid, home).

use std::path::{Path, PathBuf};

use crate::error::Result;

use super::Origin;

/// Values for `%` tokens.
pub(super) struct Tokens<'a> {
    pub(super) alias: &'a str,
    pub(super) host_name: &'a str,
    pub(super) port: u16,
    pub(super) remote_user: Option<&'a str>,
    pub(super) local_user: Option<&'a str>,
    pub(super) home: Option<&'a Path>,
}

impl Tokens<'_> {
    fn value(&self, token: char) -> std::result::Result<String, String> {
        let missing = |what: &str| format!("%{token} needs {what}");
        Ok(match token {
            'h' => self.host_name.to_owned(),
            'n' | 'k' => self.alias.to_owned(),
            'p' => self.port.to_string(),
            'r' => self
                .remote_user
                .ok_or_else(|| missing("a User or a local login name"))?
                .to_owned(),
            'u' => self
                .local_user
                .ok_or_else(|| {
                    missing("the local login name (no passwd entry for the running uid)")
                })?
                .to_owned(),
            'd' => self
                .home
                .ok_or_else(|| missing("a home directory"))?
                .to_string_lossy()
                .into_owned(),
            'i' => local_uid()
                .ok_or_else(|| missing("/proc/self"))?
                .to_string(),
            other => return Err(format!("token %{other} is not supported")),
        })
    }
}

/// Expands `%x` tokens (those in `allowed`, plus `%%`) and, with `env`, `${VAR}`.
pub(super) fn expand(
    text: &str,
    allowed: &str,
    tokens: &Tokens<'_>,
    env: bool,
) -> std::result::Result<String, String> {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        match c {
            '%' => match chars.next() {
                Some('%') => out.push('%'),
                Some(t) if allowed.contains(t) => out.push_str(&tokens.value(t)?),
                Some(t) => return Err(format!("token %{t} is not supported here")),
                None => return Err("`%` at the end of a value".to_owned()),
            },
            '$' if env && chars.as_str().starts_with('{') => {
                let rest = &chars.as_str()[1..];
                let (name, after) = rest
                    .split_once('}')
                    .ok_or_else(|| "unterminated `${`".to_owned())?;
                let value = std::env::var(name)
                    .map_err(|_| format!("environment variable {name} is not set"))?;
                out.push_str(&value);
                chars = after.chars();
            }
            c => out.push(c),
        }
    }
    Ok(out)
}

/// [`expand_path`] for each file of an accumulating keyword, errors naming its line.
pub(super) fn expand_all(files: &[(&str, &Origin)], tokens: &Tokens<'_>) -> Result<Vec<PathBuf>> {
    files
        .iter()
        .map(|(raw, origin)| expand_path(raw, tokens).map_err(|e| origin.error(e)))
        .collect()
}

/// `~` expansion, then tokens and `${VAR}`, as OpenSSH does for `IdentityFile` and
/// `UserKnownHostsFile`.
pub(super) fn expand_path(raw: &str, tokens: &Tokens<'_>) -> std::result::Result<PathBuf, String> {
    let tilded = tilde(raw, tokens.home)?;
    expand(&tilded, "dhiknpru", tokens, true).map(PathBuf::from)
}

/// The part after a leading `~` that refers to the own home (`~` or `~/...`).
pub(super) fn tilde_rest(raw: &str) -> Option<&str> {
    let rest = raw.strip_prefix('~')?;
    (rest.is_empty() || rest.starts_with('/')).then_some(rest)
}

pub(super) fn tilde(raw: &str, home: Option<&Path>) -> std::result::Result<String, String> {
    match tilde_rest(raw) {
        Some(rest) => {
            let home = home.ok_or_else(|| format!("`{raw}` needs a home directory"))?;
            Ok(format!("{}{rest}", home.to_string_lossy()))
        }
        None if raw.starts_with('~') => Err(format!("`{raw}`: ~user is not supported")),
        None => Ok(raw.to_owned()),
    }
}

/// The local login name, as OpenSSH finds it: the passwd entry of the running uid (never
/// `$USER`, which containers, systemd units and cron often leave unset, and which a caller
/// can set to anything). Looked up once per process: a passwd lookup may ask NSS (LDAP,
/// SSSD), and a fleet builds thousands of executors.
pub(crate) fn local_user() -> Option<String> {
    static LOGIN: std::sync::OnceLock<Option<String>> = std::sync::OnceLock::new();
    LOGIN
        .get_or_init(|| {
            #[cfg(unix)]
            {
                nix::unistd::User::from_uid(nix::unistd::Uid::current())
                    .ok()
                    .flatten()
                    .map(|user| user.name)
                    .filter(|name| !name.is_empty())
            }
            #[cfg(not(unix))]
            {
                std::env::var("USERNAME").ok().filter(|u| !u.is_empty())
            }
        })
        .clone()
}

#[cfg(unix)]
fn local_uid() -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    std::fs::metadata("/proc/self").ok().map(|m| m.uid())
}

#[cfg(not(unix))]
fn local_uid() -> Option<u32> {
    None
}

//! `ansible_ssh_common_args` and `ansible_ssh_extra_args`, read as `ssh` reads its
//! command line.

use std::path::PathBuf;

use super::{InventoryHost, literal::shlex_split};
use crate::error::{Error, Result};

/// The variables, in the order Ansible's ssh connection plugin appends them to `ssh`.
const ARGS_VARS: &[&str] = &["ansible_ssh_common_args", "ansible_ssh_extra_args"];

/// `ssh` options that take a value (from `ssh`'s `getopt` string).
const WITH_VALUE: &str = "BbcDEeFIiJLlmOoPpQRSWw";
/// `ssh` options that take none.
const FLAGS: &str = "1246AaCfGgKkMNnqsTtVvXxYy";

/// What a host's `ansible_ssh_common_args` and `ansible_ssh_extra_args` ask of the
/// connection ([`InventoryHost::ssh_args`]). Where an option repeats, the first value is
/// kept, as `ssh` keeps it; identity files add up.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct InventorySshArgs {
    /// `-J host` or `-o ProxyJump=host` (a comma-separated chain, as `ssh` takes it).
    pub proxy_jump: Option<String>,
    /// `-p port` or `-o Port=port`. [`InventoryHost::port`] wins over it.
    pub port: Option<u16>,
    /// `-l user` or `-o User=user`. [`InventoryHost::user`] wins over it.
    pub user: Option<String>,
    /// `-i file` and `-o IdentityFile=file`, in order, after
    /// [`InventoryHost::private_key_file`].
    pub identity_files: Vec<PathBuf>,
    /// `-o StrictHostKeyChecking=value` (`yes`, `no`, `accept-new`, …), as written.
    pub strict_host_key_checking: Option<String>,
    /// `-o UserKnownHostsFile=file …` (one or more files).
    pub known_hosts_files: Vec<PathBuf>,
    /// Every other option and argument, as written (`-o ControlPersist=60s`, `-C`,
    /// `-F /etc/ssh/alt`): not applied, listed so that a caller can say so.
    pub ignored: Vec<String>,
}

pub(super) fn parse(host: &InventoryHost) -> Result<InventorySshArgs> {
    let mut args = InventorySshArgs::default();
    for var in ARGS_VARS {
        let Some(text) = host.vars.get(*var) else {
            continue;
        };
        let bad = |what: String| Error::InvalidInput {
            reason: format!("inventory host {}: {var} `{text}`: {what}", host.name),
        };
        // `_split_ssh_args`: `shlex.split`, each word stripped, empty words dropped.
        let words: Vec<String> = shlex_split(text, false)
            .map_err(bad)?
            .into_iter()
            .map(|w| w.trim().to_owned())
            .filter(|w| !w.is_empty())
            .collect();
        read_words(&words, &mut args).map_err(bad)?;
    }
    Ok(args)
}

/// `getopt`-style: flags may be bundled (`-At`), a value may be attached (`-p2222`) or the
/// next word; `--` ends the options.
fn read_words(words: &[String], args: &mut InventorySshArgs) -> std::result::Result<(), String> {
    let mut words = words.iter();
    while let Some(word) = words.next() {
        if word == "--" {
            args.ignored.extend(words.by_ref().cloned());
            break;
        }
        let Some(letters) = word.strip_prefix('-').filter(|l| !l.is_empty()) else {
            args.ignored.push(word.clone());
            continue;
        };
        for (at, letter) in letters.char_indices() {
            if WITH_VALUE.contains(letter) {
                let attached = &letters[at + letter.len_utf8()..];
                let value = if attached.is_empty() {
                    words
                        .next()
                        .cloned()
                        .ok_or_else(|| format!("option -{letter} needs a value"))?
                } else {
                    attached.to_owned()
                };
                option(letter, &value, args)?;
                break;
            }
            if FLAGS.contains(letter) {
                args.ignored.push(format!("-{letter}"));
            } else {
                args.ignored.push(format!("-{letter} (not an ssh option)"));
            }
        }
    }
    Ok(())
}

fn option(
    letter: char,
    value: &str,
    args: &mut InventorySshArgs,
) -> std::result::Result<(), String> {
    match letter {
        'p' => set_port(value, args),
        'l' => {
            args.user.get_or_insert_with(|| value.to_owned());
            Ok(())
        }
        'i' => {
            args.identity_files.push(PathBuf::from(value));
            Ok(())
        }
        'J' => {
            args.proxy_jump.get_or_insert_with(|| value.to_owned());
            Ok(())
        }
        'o' => config_option(value, args),
        _ => {
            args.ignored.push(format!("-{letter} {value}"));
            Ok(())
        }
    }
}

fn set_port(value: &str, args: &mut InventorySshArgs) -> std::result::Result<(), String> {
    let port: u16 = value
        .trim()
        .parse()
        .ok()
        .filter(|p| *p > 0)
        .ok_or_else(|| format!("`{value}` is not a port"))?;
    args.port.get_or_insert(port);
    Ok(())
}

/// `-o Keyword=value`, `-o "Keyword value"`, `-o Keyword = value`; keywords are
/// case-insensitive, as in `ssh_config`.
fn config_option(option: &str, args: &mut InventorySshArgs) -> std::result::Result<(), String> {
    let option_text = option.trim();
    let keyword_end = option_text
        .find(|c: char| c == '=' || c.is_whitespace())
        .unwrap_or(option_text.len());
    let (keyword, rest) = option_text.split_at(keyword_end);
    let rest = rest.trim_start();
    let value = rest.strip_prefix('=').unwrap_or(rest).trim();
    let unquoted = value
        .strip_prefix('"')
        .and_then(|v| v.strip_suffix('"'))
        .unwrap_or(value);
    match keyword.to_ascii_lowercase().as_str() {
        "port" => set_port(unquoted, args)?,
        "user" => {
            args.user.get_or_insert_with(|| unquoted.to_owned());
        }
        "identityfile" => args.identity_files.push(PathBuf::from(unquoted)),
        "proxyjump" => {
            args.proxy_jump.get_or_insert_with(|| unquoted.to_owned());
        }
        "stricthostkeychecking" => {
            args.strict_host_key_checking
                .get_or_insert_with(|| unquoted.to_owned());
        }
        "userknownhostsfile" => {
            if args.known_hosts_files.is_empty() {
                args.known_hosts_files = shlex_split(value, false)?
                    .into_iter()
                    .map(PathBuf::from)
                    .collect();
            }
        }
        _ => args.ignored.push(format!("-o {option_text}")),
    }
    Ok(())
}

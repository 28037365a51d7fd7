//! The keywords this crate acts on and their values, checked when the file is loaded (as
//! `ssh` checks them): ports, flags, times (`convtime`), `ProxyJump` lists.

use std::time::Duration;

use crate::config::{jump_host, limit};

use super::StrictHostKeyChecking;

/// One `ProxyJump` element.
#[derive(Debug, Clone)]
pub(super) struct JumpSpec {
    pub(super) user: Option<String>,
    pub(super) host: String,
    pub(super) port: Option<u16>,
}

#[derive(Debug, Clone)]
pub(super) enum Setting {
    HostName(String),
    User(String),
    Port(u16),
    IdentityFile(String),
    CertificateFile(String),
    IdentitiesOnly(bool),
    /// Empty for `none`.
    ProxyJump(Vec<JumpSpec>),
    /// `None` for `none`.
    ProxyCommand(Option<String>),
    /// Empty for `none`.
    UserKnownHostsFile(Vec<String>),
    GlobalKnownHostsFile(Vec<String>),
    StrictHostKeyChecking(StrictHostKeyChecking),
    ServerAliveInterval(Duration),
    ServerAliveCountMax(usize),
    ConnectTimeout(Duration),
    /// A keyword this crate does not act on (kept to report it).
    Ignored(String),
}

impl Setting {
    /// Parses the value of `keyword` (`lower` is its lower-case form).
    pub(super) fn parse(
        lower: &str,
        keyword: String,
        args: Vec<String>,
    ) -> std::result::Result<Self, String> {
        Ok(match lower {
            "hostname" => Setting::HostName(single(&keyword, args)?),
            "user" => Setting::User(single(&keyword, args)?),
            "port" => Setting::Port(parse_port(&single(&keyword, args)?)?),
            "identityfile" => Setting::IdentityFile(single(&keyword, args)?),
            "certificatefile" => Setting::CertificateFile(single(&keyword, args)?),
            "identitiesonly" => Setting::IdentitiesOnly(parse_flag(&single(&keyword, args)?)?),
            "proxyjump" => Setting::ProxyJump(parse_proxy_jump(&single(&keyword, args)?)?),
            "proxycommand" => Setting::ProxyCommand(parse_proxy_command(&keyword, args)?),
            "userknownhostsfile" => Setting::UserKnownHostsFile(file_list(&keyword, args)?),
            "globalknownhostsfile" => Setting::GlobalKnownHostsFile(file_list(&keyword, args)?),
            "stricthostkeychecking" => {
                Setting::StrictHostKeyChecking(parse_strict(&single(&keyword, args)?)?)
            }
            "serveraliveinterval" => {
                Setting::ServerAliveInterval(parse_time(&single(&keyword, args)?)?)
            }
            "serveralivecountmax" => Setting::ServerAliveCountMax(
                single(&keyword, args)?
                    .parse()
                    .map_err(|_| "ServerAliveCountMax must be a number".to_owned())?,
            ),
            "connecttimeout" => Setting::ConnectTimeout(parse_time(&single(&keyword, args)?)?),
            _ => Setting::Ignored(keyword),
        })
    }
}

/// The one argument of `keyword`; more is an error, as in OpenSSH ("garbage at end of line").
fn single(keyword: &str, args: Vec<String>) -> std::result::Result<String, String> {
    let mut args = args.into_iter();
    match (args.next(), args.next()) {
        (Some(value), None) => Ok(value),
        (None, _) => Err(format!("{keyword} needs a value")),
        (Some(_), Some(extra)) => Err(format!("{keyword} takes one value; `{extra}` is extra")),
    }
}

fn file_list(keyword: &str, args: Vec<String>) -> std::result::Result<Vec<String>, String> {
    match args.as_slice() {
        [] => Err(format!("{keyword} needs a value")),
        [none] if none.eq_ignore_ascii_case("none") => Ok(Vec::new()),
        _ => Ok(args),
    }
}

fn parse_port(value: &str) -> std::result::Result<u16, String> {
    match value.parse::<u16>() {
        Ok(port) if port > 0 => Ok(port),
        _ => Err(format!("bad port `{value}`")),
    }
}

fn parse_flag(value: &str) -> std::result::Result<bool, String> {
    match value.to_ascii_lowercase().as_str() {
        "yes" | "true" => Ok(true),
        "no" | "false" => Ok(false),
        _ => Err(format!("expected yes or no, not `{value}`")),
    }
}

fn parse_strict(value: &str) -> std::result::Result<StrictHostKeyChecking, String> {
    Ok(match value.to_ascii_lowercase().as_str() {
        "yes" | "true" => StrictHostKeyChecking::Yes,
        "accept-new" => StrictHostKeyChecking::AcceptNew,
        "no" | "false" | "off" => StrictHostKeyChecking::No,
        "ask" => StrictHostKeyChecking::Ask,
        _ => return Err(format!("bad StrictHostKeyChecking value `{value}`")),
    })
}

pub(super) fn parse_proxy_jump(value: &str) -> std::result::Result<Vec<JumpSpec>, String> {
    if value.eq_ignore_ascii_case("none") {
        return Ok(Vec::new());
    }
    value
        .split(',')
        .map(|element| {
            let (user, host, port) = jump_host::parse_spec(element)
                .map_err(|e| format!("bad ProxyJump element `{element}`: {e}"))?;
            Ok(JumpSpec { user, host, port })
        })
        .collect()
}

fn parse_proxy_command(
    keyword: &str,
    args: Vec<String>,
) -> std::result::Result<Option<String>, String> {
    match args.as_slice() {
        [] => Err(format!("{keyword} needs a value")),
        [none] if none.eq_ignore_ascii_case("none") => Ok(None),
        _ => Ok(Some(args.join(" "))),
    }
}

/// OpenSSH's `convtime`: `90`, `90s`, `5m`, `1h30m`, units s, m, h, d, w in any case; at
/// most 2³¹ − 1 seconds in all, as there (timers could not hold much more).
pub(super) fn parse_time(value: &str) -> std::result::Result<Duration, String> {
    let bad = || format!("bad time value `{value}`");
    let too_long = || {
        format!(
            "time value `{value}` is longer than {} seconds (ssh refuses it too)",
            limit::MAX_DURATION.as_secs()
        )
    };
    let mut total: u64 = 0;
    let mut number = String::new();
    for c in value.chars() {
        if c.is_ascii_digit() {
            number.push(c);
            continue;
        }
        let unit: u64 = match c.to_ascii_lowercase() {
            's' => 1,
            'm' => 60,
            'h' => 3600,
            'd' => 86_400,
            'w' => 604_800,
            _ => return Err(bad()),
        };
        if number.is_empty() {
            return Err(bad());
        }
        let n: u64 = number.parse().map_err(|_| too_long())?;
        total = n
            .checked_mul(unit)
            .and_then(|s| total.checked_add(s))
            .ok_or_else(too_long)?;
        number.clear();
    }
    if !number.is_empty() {
        let n: u64 = number.parse().map_err(|_| too_long())?;
        total = total.checked_add(n).ok_or_else(too_long)?;
    } else if value.is_empty() {
        return Err(bad());
    }
    let total = Duration::from_secs(total);
    if total > limit::MAX_DURATION {
        return Err(too_long());
    }
    Ok(total)
}

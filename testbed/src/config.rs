//! Rendering of `sshd_config`.

use std::collections::BTreeSet;
use std::fmt::Write as _;

/// Everything that goes into the generated configuration.
#[derive(Debug)]
pub(crate) struct ConfigParams<'a> {
    pub(crate) port: u16,
    pub(crate) listen_address: String,
    pub(crate) host_key: &'a str,
    pub(crate) pid_file: &'a str,
    pub(crate) authorized_keys: &'a str,
    pub(crate) password_auth: bool,
    pub(crate) max_sessions: u32,
    pub(crate) max_startups: &'a str,
    pub(crate) user: &'a str,
    pub(crate) testbed_id: &'a str,
    /// Whether to offer the `sftp` subsystem (`internal-sftp`).
    pub(crate) sftp: bool,
    /// `ClientAliveInterval` and `ClientAliveCountMax`, when set.
    pub(crate) client_alive: Option<(u32, u32)>,
    pub(crate) extra_lines: &'a [String],
    /// Sessions get `SHLVL=1`, which keeps Debian's bash from reading `~/.bashrc` for
    /// commands over SSH (off for accounts with [home files](crate::TestbedBuilder::home_file)).
    pub(crate) quiet_bashrc: bool,
}

/// The first word of a configuration line (keywords may be followed by whitespace or
/// `=`), lower-cased, and the rest.
fn split_keyword(line: &str) -> Option<(String, &str)> {
    let line = line.trim();
    if line.is_empty() || line.starts_with('#') {
        return None;
    }
    let end = line
        .find(|c: char| c.is_whitespace() || c == '=')
        .unwrap_or(line.len());
    let (keyword, rest) = line.split_at(end);
    let rest = rest.trim_start();
    let rest = rest.strip_prefix('=').unwrap_or(rest).trim_start();
    Some((keyword.to_ascii_lowercase(), rest))
}

/// The identity of a setting for override purposes: the keyword, plus the subsystem name
/// for `Subsystem` (one `sshd_config` may define several subsystems).
fn setting_id(keyword: &str, rest: &str) -> String {
    if keyword == "subsystem" {
        let name = rest.split_whitespace().next().unwrap_or_default();
        format!("subsystem {}", name.to_ascii_lowercase())
    } else {
        keyword.to_owned()
    }
}

/// Keywords the harness needs for itself; extra lines cannot replace them (they would
/// add listeners or host keys instead, which is the caller's business).
const FIXED: &[&str] = &["port", "listenaddress", "hostkey", "allowusers", "setenv"];

pub(crate) fn render(params: &ConfigParams<'_>) -> String {
    let mut extra_global = Vec::new();
    let mut extra_setenv = Vec::new();
    let mut overridden = BTreeSet::new();
    let mut in_match = false;
    for line in params.extra_lines.iter().flat_map(|l| l.lines()) {
        let Some((keyword, rest)) = split_keyword(line) else {
            extra_global.push(line.to_owned());
            continue;
        };
        if keyword == "match" {
            in_match = true;
        }
        if !in_match && keyword == "setenv" {
            // sshd only honours the first global SetEnv line: merge.
            extra_setenv.push(rest.to_owned());
            continue;
        }
        if !in_match && !FIXED.contains(&keyword.as_str()) {
            overridden.insert(setting_id(&keyword, rest));
        }
        extra_global.push(line.to_owned());
    }

    let mut setenv = String::from(if params.quiet_bashrc { "SHLVL=1 " } else { "" });
    setenv.push_str(crate::TESTBED_ENV_VAR);
    setenv.push_str("=1 ");
    setenv.push_str(crate::TESTBED_ID_ENV_VAR);
    setenv.push('=');
    setenv.push_str(params.testbed_id);
    for vars in &extra_setenv {
        setenv.push(' ');
        setenv.push_str(vars);
    }

    let yes_no = |b: bool| if b { "yes" } else { "no" };
    let mut defaults: Vec<(&str, String)> = vec![
        ("Port", params.port.to_string()),
        ("ListenAddress", params.listen_address.clone()),
        ("HostKey", params.host_key.to_owned()),
        ("PidFile", params.pid_file.to_owned()),
        ("AuthorizedKeysFile", params.authorized_keys.to_owned()),
        ("StrictModes", "no".to_owned()),
        ("UsePAM", "no".to_owned()),
        (
            "PasswordAuthentication",
            yes_no(params.password_auth).to_owned(),
        ),
        ("KbdInteractiveAuthentication", "no".to_owned()),
        (
            "PermitRootLogin",
            if params.password_auth {
                "yes"
            } else {
                "prohibit-password"
            }
            .to_owned(),
        ),
        ("MaxSessions", params.max_sessions.to_string()),
        ("MaxStartups", params.max_startups.to_owned()),
        ("LogLevel", "VERBOSE".to_owned()),
        ("SetEnv", setenv),
        ("PrintMotd", "no".to_owned()),
        ("UseDNS", "no".to_owned()),
        ("AllowUsers", params.user.to_owned()),
    ];
    if params.sftp {
        defaults.push(("Subsystem", "sftp internal-sftp".to_owned()));
    }
    if let Some((interval, count_max)) = params.client_alive {
        defaults.push(("ClientAliveInterval", interval.to_string()));
        defaults.push(("ClientAliveCountMax", count_max.to_string()));
    }

    let mut config = String::from("# Generated by swiftide-ssh-testbed\n");
    for (keyword, value) in &defaults {
        let id = setting_id(&keyword.to_ascii_lowercase(), value);
        if overridden.contains(&id) {
            let _ = writeln!(config, "# {keyword} {value} (replaced below)");
        } else {
            let _ = writeln!(config, "{keyword} {value}");
        }
    }
    if !extra_global.is_empty() {
        config.push_str("# Extra lines\n");
        for line in extra_global {
            config.push_str(&line);
            config.push('\n');
        }
    }
    config
}

#[cfg(test)]
mod tests {
    use super::*;

    fn params(extra: &[String]) -> String {
        render(&ConfigParams {
            port: 2200,
            listen_address: "127.0.0.1".into(),
            host_key: "/d/hk",
            pid_file: "/d/pid",
            authorized_keys: "/d/ak",
            password_auth: false,
            max_sessions: 10,
            max_startups: "10:30:100",
            user: "root",
            testbed_id: "tb",
            sftp: true,
            client_alive: None,
            quiet_bashrc: true,
            extra_lines: extra,
        })
    }

    fn active(config: &str) -> Vec<&str> {
        config
            .lines()
            .filter(|l| !l.trim_start().starts_with('#'))
            .collect()
    }

    #[test]
    fn defaults() {
        let config = params(&[]);
        let lines = active(&config);
        assert!(lines.contains(&"Port 2200"));
        assert!(lines.contains(&"MaxSessions 10"));
        assert!(lines.contains(&"MaxStartups 10:30:100"));
        assert!(
            lines.contains(&"SetEnv SHLVL=1 SWIFTIDE_SSH_TESTBED=1 SWIFTIDE_SSH_TESTBED_ID=tb")
        );
        assert!(lines.contains(&"PermitRootLogin prohibit-password"));
        assert!(lines.contains(&"AllowUsers root"));
    }

    #[test]
    fn extra_lines_replace_global_defaults_but_not_match_blocks() {
        let config = params(&[
            "maxsessions=1".into(),
            "Subsystem sftp /usr/lib/openssh/sftp-server".into(),
            "SetEnv FOO=bar".into(),
            "Match User nobody\n  PasswordAuthentication yes\n  MaxStartups 1".into(),
        ]);
        let lines = active(&config);
        assert!(!lines.contains(&"MaxSessions 10"), "{config}");
        assert!(lines.contains(&"maxsessions=1"));
        assert!(!lines.contains(&"Subsystem sftp internal-sftp"));
        assert!(
            lines.contains(
                &"SetEnv SHLVL=1 SWIFTIDE_SSH_TESTBED=1 SWIFTIDE_SSH_TESTBED_ID=tb FOO=bar"
            )
        );
        assert!(!lines.iter().any(|l| l.trim() == "SetEnv FOO=bar"));
        // Inside Match: the global defaults stay.
        assert!(lines.contains(&"PasswordAuthentication no"));
        assert!(lines.contains(&"MaxStartups 10:30:100"));
        assert!(lines.contains(&"  PasswordAuthentication yes"));
        // Match block last.
        assert_eq!(lines.last(), Some(&"  MaxStartups 1"));
    }

    #[test]
    fn client_alive_lines() {
        let mut params = ConfigParams {
            port: 22,
            listen_address: "10.213.1.2".into(),
            host_key: "/d/hk",
            pid_file: "/d/pid",
            authorized_keys: "/d/ak",
            password_auth: false,
            max_sessions: 10,
            max_startups: "10:30:100",
            user: "root",
            testbed_id: "tb",
            sftp: true,
            client_alive: Some((1, 2)),
            quiet_bashrc: true,
            extra_lines: &[],
        };
        let config = render(&params);
        let lines = active(&config);
        assert!(lines.contains(&"ClientAliveInterval 1"), "{config}");
        assert!(lines.contains(&"ClientAliveCountMax 2"), "{config}");
        params.client_alive = None;
        assert!(!render(&params).contains("ClientAlive"));
        // Accounts with home files: no SHLVL, so that Debian's bash reads ~/.bashrc.
        assert!(render(&params).contains("SetEnv SHLVL=1 "));
        params.quiet_bashrc = false;
        let config = render(&params);
        assert!(!config.contains("SHLVL"), "{config}");
        assert!(
            active(&config).contains(&"SetEnv SWIFTIDE_SSH_TESTBED=1 SWIFTIDE_SSH_TESTBED_ID=tb")
        );
    }
}

//! Gathered output, as `clush -b` and `dshbak -c` show it: hosts with identical output and
//! identical status fold into one block headed by their node set (`web[01-18] (18)`); the
//! largest block comes first, the odd ones out after it.

use std::collections::HashMap;

use super::{nodeset::fold_nodeset, record::HostRecord};

/// Hosts that answered alike.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct FoldedGroup {
    /// The hosts' names, in fleet order.
    pub hosts: Vec<String>,
    /// The hosts as a node set (`web[01-18]`).
    pub nodeset: String,
    /// Their common status (`ok`, `exit 3`, `unreachable`, ...).
    pub status: String,
    /// Their common standard output (`None` when nothing ran or only digests were kept).
    pub stdout: Option<String>,
    /// Their common standard error.
    pub stderr: Option<String>,
}

/// Folds records (of one run, or of several shards' runs) into groups. Two hosts fold
/// together when their status, exit code or signal and the digests of both streams are
/// equal; hosts that ran nothing (unreachable, refused, skipped, ...) fold by status alone
/// (and a failed escalation by its reason).
/// Groups come largest first, then in the order of their first host.
pub fn fold_records(records: &[HostRecord]) -> Vec<FoldedGroup> {
    type Key<'a> = (
        &'a str,
        Option<&'a str>,
        Option<u32>,
        Option<&'a str>,
        Option<&'a str>,
        Option<&'a str>,
    );
    let mut order: Vec<Key<'_>> = Vec::new();
    let mut groups: HashMap<Key<'_>, Vec<&HostRecord>> = HashMap::new();
    let mut sorted: Vec<&HostRecord> = records.iter().collect();
    sorted.sort_by_key(|r| r.member);
    for record in sorted {
        let key = (
            record.status.as_str(),
            record.become_failure.as_deref(),
            record.exit_code,
            record.signal.as_deref(),
            record.stdout_sha256.as_deref(),
            record.stderr_sha256.as_deref(),
        );
        let members = groups.entry(key).or_default();
        if members.is_empty() {
            order.push(key);
        }
        members.push(record);
    }
    let mut folded: Vec<(usize, FoldedGroup)> = order
        .into_iter()
        .enumerate()
        .filter_map(|(position, key)| {
            let members = groups.remove(&key)?;
            let first = members.first()?;
            let hosts: Vec<String> = members.iter().map(|r| r.host.clone()).collect();
            Some((
                position,
                FoldedGroup {
                    nodeset: fold_nodeset(&hosts),
                    status: first.host_status().to_string(),
                    stdout: first.stdout.clone(),
                    stderr: first.stderr.clone(),
                    hosts,
                },
            ))
        })
        .collect();
    folded.sort_by_key(|(position, group)| (std::cmp::Reverse(group.hosts.len()), *position));
    folded.into_iter().map(|(_, group)| group).collect()
}

impl std::fmt::Display for FoldedGroup {
    /// A `clush -b` block: a rule, `web[01-18] (18) ok`, a rule, then the output (standard
    /// error after standard output).
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let header = format!("{} ({}) {}", self.nodeset, self.hosts.len(), self.status);
        let rule = "-".repeat(header.chars().count().min(78));
        writeln!(f, "{rule}\n{header}\n{rule}")?;
        for text in [&self.stdout, &self.stderr].into_iter().flatten() {
            f.write_str(text)?;
            if !text.is_empty() && !text.ends_with('\n') {
                f.write_str("\n")?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::fold_records;
    use crate::fleet::record::{HostRecord, SCHEMA_VERSION};

    fn record(member: usize, host: &str, status: &str, stdout: Option<&str>) -> HostRecord {
        HostRecord {
            schema_version: SCHEMA_VERSION,
            host: host.into(),
            address: host.into(),
            port: 22,
            user: "ops".into(),
            member,
            batch: Some(0),
            status: status.into(),
            exit_code: stdout.map(|_| if status == "ok" { 0 } else { 2 }),
            signal: None,
            error: None,
            stdout: stdout.map(str::to_owned),
            stderr: stdout.map(|_| String::new()),
            stdout_sha256: stdout.map(str::to_owned),
            stderr_sha256: stdout.map(|_| String::new()),
            omitted_bytes: 0,
            started_ms: Some(0),
            duration_ms: 1,
            attempts: 1,
            become_failure: None,
            changed: None,
            files: None,
        }
    }

    #[test]
    fn identical_output_and_status_fold_under_a_node_set() {
        let mut records: Vec<HostRecord> = (1..=18)
            .map(|i| record(i, &format!("web{i:02}"), "ok", Some("6.1.0\n")))
            .collect();
        records.push(record(19, "web19", "ok", Some("5.10.0\n")));
        records.push(record(20, "web20", "failed", Some("6.1.0\n")));
        records.push(record(21, "db1", "unreachable", None));
        records.push(record(22, "db2", "unreachable", None));
        // Shards arrive in any order: folding sorts by member.
        records.reverse();
        let groups = fold_records(&records);
        let heads: Vec<(String, String)> = groups
            .iter()
            .map(|g| (g.nodeset.clone(), g.status.clone()))
            .collect();
        assert_eq!(
            heads,
            [
                ("web[01-18]".into(), "ok".into()),
                ("db[1-2]".into(), "unreachable".into()),
                ("web19".into(), "ok".into()),
                ("web20".into(), "exit 2".into()),
            ]
        );
        let block = groups[0].to_string();
        assert_eq!(
            block,
            "------------------\nweb[01-18] (18) ok\n------------------\n6.1.0\n"
        );
        assert_eq!(groups[1].to_string().lines().count(), 3);
    }

    #[test]
    fn failed_escalations_fold_by_their_reason() {
        let failed = |member: usize, host: &str, reason: &str| HostRecord {
            become_failure: Some(reason.into()),
            ..record(member, host, "become_failed", None)
        };
        let groups = fold_records(&[
            failed(1, "web1", "incorrect_password"),
            failed(2, "web2", "not_allowed"),
            failed(3, "web3", "incorrect_password"),
        ]);
        let headers: Vec<(String, String)> = groups
            .iter()
            .map(|group| (group.nodeset.clone(), group.status.clone()))
            .collect();
        assert_eq!(
            headers,
            [
                (
                    "web[1,3]".into(),
                    "become failed (incorrect password)".into()
                ),
                ("web2".into(), "become failed (not allowed)".into()),
            ]
        );
    }
}

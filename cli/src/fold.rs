//! `swiftide-ssh fold`: the JSON records of several runs merged into one folded report.

use std::path::{Path, PathBuf};

use swiftide_ssh_executor::{
    HostRecord,
    fleet::{exit_code, max_exit_code, read_records, write_failed_hosts},
};

use crate::{
    args::Usage,
    printer::{print_folded, print_summary},
};

/// `swiftide-ssh fold`: merges record files into one report.
pub(crate) fn fold(files: &[PathBuf], failed_hosts: Option<&Path>, max: bool) -> Result<u8, Usage> {
    let mut text = String::new();
    let stdin = [PathBuf::from("-")];
    for file in if files.is_empty() { &stdin[..] } else { files } {
        if file.as_os_str() == "-" {
            std::io::Read::read_to_string(&mut std::io::stdin(), &mut text)?;
        } else {
            text.push_str(
                &std::fs::read_to_string(file)
                    .map_err(|e| Usage(format!("cannot read {}: {e}", file.display())))?,
            );
        }
        text.push('\n');
    }
    let records = read_records(&text)?;
    print_folded(&records);
    if let Some(path) = failed_hosts {
        write_failed_hosts(path, &records)?;
    }
    print_summary(&records, None);
    let statuses: Vec<_> = records.iter().map(HostRecord::host_status).collect();
    Ok(if max {
        u8::try_from(max_exit_code(&statuses)).unwrap_or(u8::MAX)
    } else {
        exit_code(&statuses)
    })
}

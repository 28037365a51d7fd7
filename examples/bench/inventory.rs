//! Scenario: reading a large Ansible inventory and selecting hosts from it, against
//! ansible-core itself.
//!
//! A generated inventory directory of 10,000 hosts: 250 service groups of 40 hosts (INI
//! files of 10 groups each), nested under 3 role groups (`web`, `db`, `app`), 3 region
//! groups and 2 environments (`prod` holds 80% of the services, `stage` the rest), a
//! `canary` group of every 50th host, one `group_vars/<group>.json` per group (with `all`)
//! and 100 `host_vars/` files: 260 groups with `all`. Ours is `Inventory::from_path(dir)` then
//! `select("web:&prod:!canary")` (and `select("all")`, which resolves every host's
//! variables), in this process; the peers are whole `ansible web:&prod:!canary -i DIR
//! --list-hosts` and `ansible-inventory -i DIR --list` processes from the bench's
//! ansible-core venv (Python start-up included, measured apart). Rounds interleave ours and
//! the peers'. Both must select the same hosts in the same order.

use std::{
    path::{Path, PathBuf},
    process::{Command, Stdio},
    time::{Duration, Instant},
};

use anyhow::{Context, ensure};
use swiftide_ssh_executor::Inventory;

use crate::{
    Ctx,
    report::Report,
    stats::{Samples, ms},
};

const HOSTS: usize = 10_000;
const SERVICES: usize = 250;
const PATTERN: &str = "web:&prod:!canary";

fn host(i: usize) -> String {
    format!("node-{i:05}.example.net")
}

/// Writes the inventory directory; returns its path and the number of groups.
fn write_inventory(root: &Path) -> anyhow::Result<(PathBuf, usize)> {
    let dir = root.join("inventory");
    std::fs::create_dir_all(dir.join("group_vars"))?;
    std::fs::create_dir_all(dir.join("host_vars"))?;
    let per_service = HOSTS / SERVICES;
    let mut groups = vec!["all".to_owned()];
    for file in 0..SERVICES / 10 {
        let mut text = String::new();
        for service in file * 10..file * 10 + 10 {
            text.push_str(&format!("[svc{service:03}]\n"));
            for i in service * per_service..(service + 1) * per_service {
                text.push_str(&format!("{} ansible_port={}\n", host(i), 2200 + i % 50));
            }
            groups.push(format!("svc{service:03}"));
        }
        std::fs::write(dir.join(format!("10-services-{file:02}.ini")), text)?;
    }
    let mut parents = String::new();
    let mut children = |parent: &str, members: &mut dyn Iterator<Item = usize>| {
        parents.push_str(&format!("[{parent}:children]\n"));
        for service in members {
            parents.push_str(&format!("svc{service:03}\n"));
        }
        groups.push(parent.to_owned());
    };
    children("web", &mut (0..100));
    children("db", &mut (100..180));
    children("app", &mut (180..SERVICES));
    children("eu", &mut (0..SERVICES).filter(|s| s % 3 == 0));
    children("us", &mut (0..SERVICES).filter(|s| s % 3 == 1));
    children("ap", &mut (0..SERVICES).filter(|s| s % 3 == 2));
    children("prod", &mut (0..SERVICES).filter(|s| s % 5 != 0));
    children("stage", &mut (0..SERVICES).filter(|s| s % 5 == 0));
    parents.push_str("[canary]\n");
    for i in (0..HOSTS).step_by(50) {
        parents.push_str(&format!("{}\n", host(i)));
    }
    groups.push("canary".to_owned());
    parents.push_str("[prod:vars]\nansible_group_priority=2\n");
    std::fs::write(dir.join("20-parents.ini"), parents)?;
    for (n, group) in groups.iter().enumerate() {
        std::fs::write(
            dir.join("group_vars").join(format!("{group}.json")),
            format!(
                "{{\"ansible_user\": \"user-{n}\", \"tier\": \"{group}\", \"level\": {n}, \"monitored\": true}}"
            ),
        )?;
    }
    for i in (0..HOSTS).step_by(HOSTS / 100) {
        std::fs::write(
            dir.join("host_vars").join(format!("{}.json", host(i))),
            "{\"ansible_host\": \"10.9.9.9\", \"level\": -1}",
        )?;
    }
    Ok((dir, groups.len()))
}

/// `ansible-core`'s commands, from the bench venv, in an empty directory with an empty
/// configuration.
struct Ansible {
    bin: PathBuf,
    scratch: PathBuf,
}

impl Ansible {
    fn command(&self, program: &str) -> Command {
        let mut command = Command::new(self.bin.join(program));
        command
            .current_dir(&self.scratch)
            .env("ANSIBLE_CONFIG", self.scratch.join("ansible.cfg"))
            .env("ANSIBLE_HOME", self.scratch.join("home"))
            .env("PYTHONWARNINGS", "ignore")
            .stdin(Stdio::null());
        command
    }

    /// `ansible PATTERN -i DIR --list-hosts`: the hosts, in its order.
    fn list_hosts(&self, inventory: &Path) -> anyhow::Result<Vec<String>> {
        let out = self
            .command("ansible")
            .args([PATTERN, "-i"])
            .arg(inventory)
            .arg("--list-hosts")
            .output()?;
        ensure!(
            out.status.success(),
            "ansible --list-hosts failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8_lossy(&out.stdout);
        Ok(text
            .lines()
            .skip_while(|l| !l.trim_start().starts_with("hosts ("))
            .skip(1)
            .map(|l| l.trim().to_owned())
            .filter(|l| !l.is_empty())
            .collect())
    }

    /// `ansible-inventory -i DIR --list`, its JSON discarded after a size check.
    fn list(&self, inventory: &Path) -> anyhow::Result<usize> {
        let out = self
            .command("ansible-inventory")
            .arg("-i")
            .arg(inventory)
            .arg("--list")
            .output()?;
        ensure!(
            out.status.success(),
            "ansible-inventory --list failed: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        Ok(out.stdout.len())
    }

    /// A Python start-up with ansible-core imported: the floor of every `ansible` process.
    fn startup(&self) -> anyhow::Result<()> {
        let status = self
            .command("python")
            .args(["-c", "import ansible.cli.adhoc"])
            .status()?;
        ensure!(
            status.success(),
            "python -c 'import ansible.cli.adhoc' failed"
        );
        Ok(())
    }
}

pub fn inventory(ctx: &mut Ctx, report: &mut Report) -> anyhow::Result<()> {
    let scratch = tempfile::Builder::new().prefix("swb-inventory").tempdir()?;
    let (dir, groups) = write_inventory(scratch.path())?;
    println!("  {HOSTS} hosts, {groups} groups, group_vars for each, 100 host_vars files");
    let (bin, version) = crate::fleet::setup_ansible(&crate::bench_dir().join("ansible-venv"))
        .map_err(anyhow::Error::msg)
        .context("ansible-core peer")?;
    println!("  peer: {version}");
    let ansible_scratch = scratch.path().join("ansible");
    std::fs::create_dir_all(&ansible_scratch)?;
    std::fs::write(ansible_scratch.join("ansible.cfg"), "")?;
    let ansible = Ansible {
        bin: bin
            .parent()
            .map(Path::to_path_buf)
            .context("the ansible binary's directory")?,
        scratch: ansible_scratch,
    };

    // The same hosts, in the same order, from both.
    let theirs = ansible.list_hosts(&dir)?;
    let ours: Vec<String> = Inventory::from_path(&dir)?
        .select(PATTERN)?
        .into_iter()
        .map(|h| h.name)
        .collect();
    ensure!(
        ours == theirs,
        "selections differ: ours {} hosts, ansible {} (first {:?} vs {:?})",
        ours.len(),
        theirs.len(),
        ours.first(),
        theirs.first()
    );
    println!(
        "  `{PATTERN}` selects {} hosts, in the same order in both",
        ours.len()
    );

    let rounds = ctx.size(5, 2);
    let (mut read, mut select, mut select_all) = (Vec::new(), Vec::new(), Vec::new());
    let (mut ours_pattern, mut ours_all) = (Vec::new(), Vec::new());
    let (mut list_hosts, mut list, mut startup) = (Vec::new(), Vec::new(), Vec::new());
    for round in 0..rounds {
        let t = Instant::now();
        let inventory = Inventory::from_path(&dir)?;
        let read_time = t.elapsed();
        let t = Instant::now();
        let selected = inventory.select(PATTERN)?;
        let select_time = t.elapsed();
        ensure!(
            selected.len() == theirs.len(),
            "round {round}: selection changed"
        );
        let t = Instant::now();
        let all = inventory.select("all")?;
        let all_time = t.elapsed();
        ensure!(all.len() == HOSTS, "round {round}: {} hosts", all.len());
        read.push(read_time);
        select.push(select_time);
        select_all.push(all_time);
        ours_pattern.push(read_time + select_time);
        ours_all.push(read_time + all_time);

        let t = Instant::now();
        ansible.list_hosts(&dir)?;
        list_hosts.push(t.elapsed());
        let t = Instant::now();
        let bytes = ansible.list(&dir)?;
        list.push(t.elapsed());
        let t = Instant::now();
        ansible.startup()?;
        startup.push(t.elapsed());
        println!(
            "  round {}: ours read {} + select {} (+ all {}); ansible --list-hosts {}, ansible-inventory --list {} ({} KiB), python+ansible import {}",
            round + 1,
            ms(read_time),
            ms(select_time),
            ms(all_time),
            ms(*list_hosts.last().unwrap_or(&Duration::ZERO)),
            ms(*list.last().unwrap_or(&Duration::ZERO)),
            bytes / 1024,
            ms(*startup.last().unwrap_or(&Duration::ZERO)),
        );
    }
    let median = |v: Vec<Duration>| Samples::new(v).median();
    let (read, select, select_all) = (median(read), median(select), median(select_all));
    let (ours_pattern, ours_all) = (median(ours_pattern), median(ours_all));
    let (list_hosts, list, startup) = (median(list_hosts), median(list), median(startup));
    let ratio = |a: Duration, b: Duration| a.as_secs_f64() / b.as_secs_f64();
    report.row(
        format!(
            "inventory: read a {HOSTS}-host inventory directory ({groups} groups, group_vars) and select `{PATTERN}`"
        ),
        format!(
            "{} (read {} + select {}), in-process",
            ms(ours_pattern),
            ms(read),
            ms(select)
        ),
        format!(
            "`ansible {PATTERN} -i DIR --list-hosts`: {} (Python + ansible-core import alone: {})",
            ms(list_hosts),
            ms(startup)
        ),
        format!(
            "{:.3}× (ours / ansible; {:.2}× of ansible's time past its start-up)",
            ratio(ours_pattern, list_hosts),
            ratio(ours_pattern, list_hosts.saturating_sub(startup).max(Duration::from_micros(1)))
        ),
        "faster than ansible-core (< 1×), same hosts in the same order",
        Some(ours_pattern < list_hosts),
    );
    report.row(
        format!("inventory: every host's variables of the {HOSTS}-host directory"),
        format!(
            "{} (read {} + `select(\"all\")` {})",
            ms(ours_all),
            ms(read),
            ms(select_all)
        ),
        format!("`ansible-inventory -i DIR --list`: {}", ms(list)),
        format!("{:.3}×", ratio(ours_all, list)),
        "faster than ansible-core (< 1×)",
        Some(ours_all < list),
    );
    Ok(())
}

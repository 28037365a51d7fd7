//! Ansible inventories, read and queried as ansible-core 2.19 does.
//!
//! # Sources
//!
//! [`Inventory::from_path`] reads one source and [`Inventory::from_paths`] several (as a
//! repeated `ansible -i`: each is parsed in turn into one inventory, later sources adding
//! hosts, groups and variables to what earlier ones defined). A source is:
//!
//! - **An INI file** (Ansible's `ini` plugin): `[group]`, `[group:children]`,
//!   `[group:vars]` sections, `host:port`, `key=value` host variables, host ranges
//!   (`www[001:006]`, `db-[a:c]`, `n[1:9:2]`). Values are typed as Ansible types them
//!   (Python's `ast.literal_eval`: `5` is a number, `'5'` and `"x"` are strings, `True` is
//!   a boolean, anything else is the text as written). A `[child]` named in a
//!   `[parent:children]` section must be declared somewhere in the file, and a
//!   `[group:vars]` section needs its group declared, as Ansible requires.
//! - **A YAML file** (the `yaml` plugin; crate feature `yaml`): groups with `hosts`,
//!   `children` and `vars`. Keys other than these are skipped with a
//!   [warning](Inventory::warnings), as Ansible skips them.
//! - **`ansible-inventory --list` JSON** (`{"_meta": {"hostvars": …}, "all": {"children":
//!   […]}, "web": {"hosts": […], "vars": {…}, "children": […]}}`), printed by an executable
//!   inventory script, or from a plain file when it has the top-level `_meta` that
//!   `ansible-inventory --list` always prints ([`Inventory::parse_json`] reads it from text).
//! - **An executable inventory script**: a file with an execute bit that starts with `#!`
//!   (or is an ELF binary) is run with `--list` and its standard output read as the JSON
//!   above (with `--host NAME` per host when the output has no `_meta`, as Ansible does).
//!   It runs with no standard input, in its own process group, for at most
//!   [`SCRIPT_TIMEOUT`] (30 s): then it is killed and the read fails. A script that exits
//!   non-zero, prints no valid JSON or times out is an error carrying its standard error.
//!   **Reading such a source blocks the calling thread** while the script runs; from async
//!   code call it through `tokio::task::spawn_blocking` (the CLI reads its inventory before
//!   any runtime work). A file without an execute bit is never run: it is parsed as INI,
//!   YAML or JSON.
//! - **A directory**: every entry, in name order, recursively, as Ansible walks one:
//!   entries named `group_vars`, `host_vars` or `vars_plugins`, hidden entries (`.x`) and
//!   names ending in ansible-core's `INVENTORY_IGNORE_EXTS` (`.pyc .pyo .swp .bak ~ .rpm
//!   .md .txt .rst .orig .cfg .retry`; since ansible-core 2.19 `.ini` files are read) are
//!   skipped.
//! - **A host list**: a source that is not a path and has a comma (`web1,web2:2222,`).
//!
//! A file is tried as Ansible's plugins try it: a script when executable, then YAML when its
//! extension is `.yml`, `.yaml`, `.json` or none, then INI (any extension but `.toml`).
//!
//! # Variables
//!
//! `group_vars/<group>` and `host_vars/<host>` beside each source (in the directory of a
//! file source, inside a directory source) are read as Ansible's `host_group_vars` plugin
//! reads them: the first of `<name>`, `<name>.yml`, `<name>.yaml`, `<name>.json` that
//! exists, and when that is a directory every `.yml`, `.yaml`, `.json` or extensionless
//! file in it, recursively, in name order. A host's variables are resolved in ansible-core's
//! precedence, lowest first:
//!
//! 1. the inventory's `all` group variables (`[all:vars]`, `all: vars:`);
//! 2. the inventory's variables of every other group of the host, parents before children:
//!    by depth below `all`, then `ansible_group_priority` (set in the inventory source; in
//!    `group_vars/` it is an ordinary variable, as in Ansible), then name;
//! 3. `group_vars/all` of each source, in source order;
//! 4. `group_vars/<group>` of each source in source order, each in the group order of 2;
//! 5. the host's own inventory variables;
//! 6. `host_vars/<host>` of each source, in source order.
//!
//! Values are kept as text: strings as they are, integers in decimal, booleans as `true` and
//! `false`, null as the empty string, floats as Python prints them (`1.0`, `1e+16`), and
//! lists and maps as YAML text (from YAML), JSON text (from JSON) or as written (from INI).
//!
//! A vault-encrypted value (a YAML `!vault` value, a JSON `{"__ansible_vault": …}`) or a
//! vault-encrypted file (`$ANSIBLE_VAULT;` header) is refused with an error naming the
//! variable or the file: Ansible Vault is not supported.
//!
//! # Host patterns
//!
//! [`Inventory::select`] selects hosts with Ansible's whole pattern language and returns
//! them in the order `ansible PATTERN --list-hosts` prints them:
//!
//! - terms separated by `,`, or by `:` when the pattern has no comma (colons inside
//!   `[…]` and in an address with a port do not split: `ansible` reads `host:22` as one
//!   term);
//! - a term is a host name, a group name (its hosts and its children's, in Ansible's
//!   order: the group's own hosts, then each child's, breadth first), `all` or `*`, a shell
//!   wildcard (`web*`, `db?`, `[ab]x`, Python `fnmatch` rules) matched against every group
//!   name and, for wildcards, also every host name, or a regular expression after `~`
//!   (`~web\d+`, matched at the start of the name as Python's `re.match` does; lookaround
//!   and back-references are not supported);
//! - a subscript on a group term: `web[0]`, `web[-1]`, `web[1:3]` (both ends **inclusive**,
//!   as Ansible's), `web[2:]`; `web[:3]` is no subscript but a wildcard, as in Ansible;
//! - `&term` keeps only hosts also in `term`, `!term` removes `term`'s hosts; terms are
//!   applied unions first (in the order given), then intersections, then exclusions, and
//!   a pattern of only `&`/`!` terms starts from `all`.
//!
//! A term that matches no host and no group is an error (Ansible only warns, unless
//! `host_pattern_mismatch = error`): a misspelt exclusion must not silently select the
//! hosts it meant to exclude. So is a subscript index past the end of its group.
//! [`Inventory::select_limited`] narrows a selection as `--limit` does.
//!
//! # Connection variables
//!
//! [`InventoryHost::address`], [`port`](InventoryHost::port), [`user`](InventoryHost::user)
//! and [`private_key_file`](InventoryHost::private_key_file) read `ansible_host`,
//! `ansible_port`, `ansible_user` and `ansible_ssh_private_key_file` (and their older
//! `ansible_ssh_host`, `ansible_ssh_port`, `ansible_ssh_user`, `ansible_private_key_file`
//! spellings, which win when both are set, as in Ansible's ssh connection plugin).
//! [`InventoryHost::ssh_args`] reads `ansible_ssh_common_args` and
//! `ansible_ssh_extra_args`.
//!
//! # Where this differs from Ansible
//!
//! - Only the `ini`, `yaml`, `script` and `host_list` inventory plugins (and the
//!   `ansible-inventory --list` JSON from a plain file, which Ansible reads only from a
//!   script); a YAML plugin configuration (`plugin: aws_ec2`), TOML and the `constructed`
//!   and `generator` plugins are refused.
//! - A source none of the parsers accepts, or a failing script, is an error; Ansible warns
//!   and goes on without it (or, for a failing script, tries to parse the script's text).
//!   An executable file is run only when it starts with `#!` or is an ELF binary; Ansible
//!   tries to run any, and parses it when that fails.
//! - A pattern term that matches nothing is an error (above); the implicit `localhost` is
//!   not provided; an empty pattern is an error (Ansible reads it as `all`).
//! - Several limits narrow each other (Ansible takes a single `--limit`); the lines of an
//!   `@FILE` limit that match nothing are skipped.
//! - `group_vars/` and `host_vars/` files are read with the inventory, for every group and
//!   host (Ansible reads a host's when it needs its variables): a broken or vault-encrypted
//!   file fails the read even when it concerns no selected host.
//! - Ansible's magic variables (`inventory_hostname`, `group_names`, `groups`,
//!   `inventory_file`, …) are not among a host's variables.
//! - Where Ansible's own order is not deterministic, one of its orders is chosen: when two
//!   groups at the same depth below a selected group both have child groups, ansible-core
//!   walks them in the iteration order of a Python `set` (which follows object addresses
//!   and changes from run to run); here they are walked in inventory order.
//! - Variables are text, and a map set twice for one host or group replaces the first
//!   instead of merging their keys. YAML is read as YAML 1.2 where Ansible's PyYAML reads
//!   YAML 1.1: `yes`, `no`, `on` and `off` are text here and booleans there, and numbers
//!   written with underscores, leading zeros or exponents may be typed differently. A
//!   duplicate key in a YAML map is an error (PyYAML keeps the last).
//! - No Vault, no Jinja templating (values are kept as written, as `ansible-inventory` prints
//!   them), no vars plugins other than `host_group_vars`, no `--playbook-dir` vars.

mod address;
mod document;
mod ini;
mod literal;
mod pattern;
mod sources;
mod ssh_args;

use std::{
    collections::{BTreeMap, HashMap, HashSet},
    path::{Path, PathBuf},
    time::Duration,
};

pub use ssh_args::InventorySshArgs;

use crate::error::{Error, Result};
use literal::Value;

/// How long an executable inventory script may run before it is killed and the read fails.
pub const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);

/// Each connection variable under its names, lowest precedence first: Ansible's ssh
/// connection plugin takes the last one set.
const HOST_VARS: &[&str] = &["ansible_host", "ansible_ssh_host"];
const PORT_VARS: &[&str] = &["ansible_port", "ansible_ssh_port"];
const USER_VARS: &[&str] = &["ansible_user", "ansible_ssh_user"];
const KEY_VARS: &[&str] = &["ansible_private_key_file", "ansible_ssh_private_key_file"];

/// The groups every inventory has, at these positions.
const ALL: usize = 0;
const UNGROUPED: usize = 1;

/// An Ansible inventory: its hosts, groups and variables.
#[derive(Debug, Clone)]
pub struct Inventory {
    /// In order of first definition (Ansible's `InventoryData.hosts`).
    hosts: Vec<Host>,
    /// `hosts`' names, in the same order.
    host_names: Vec<String>,
    host_index: HashMap<String, usize>,
    /// In order of creation, `all` and `ungrouped` first.
    groups: Vec<Group>,
    group_index: HashMap<String, usize>,
    /// `group_vars/` and `host_vars/` beside each source, in source order.
    adjacent: Vec<AdjacentVars>,
    warnings: Vec<String>,
    /// Each group's place in the precedence order (depth, priority, name).
    rank: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Host {
    vars: BTreeMap<String, String>,
    /// The groups that list it directly.
    groups: Vec<usize>,
}

#[derive(Debug, Clone)]
struct Group {
    name: String,
    /// Direct members, in order of addition.
    hosts: Vec<usize>,
    children: Vec<usize>,
    parents: Vec<usize>,
    vars: BTreeMap<String, String>,
    priority: i64,
    /// The longest path from `all`.
    depth: usize,
}

impl Group {
    /// A new group without members or variables, of Ansible's default priority (1).
    fn named(name: &str) -> Self {
        Group {
            name: name.to_owned(),
            hosts: Vec::new(),
            children: Vec::new(),
            parents: Vec::new(),
            vars: BTreeMap::new(),
            priority: 1,
            depth: 0,
        }
    }
}

#[derive(Debug, Clone, Default)]
struct AdjacentVars {
    groups: HashMap<usize, BTreeMap<String, String>>,
    hosts: HashMap<usize, BTreeMap<String, String>>,
}

/// One host of an inventory, with its variables resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InventoryHost {
    /// The inventory name.
    pub name: String,
    /// Every variable that applies to the host, resolved in Ansible's precedence.
    pub vars: BTreeMap<String, String>,
    /// The groups it belongs to, directly or through `children`, `all` included, sorted.
    pub groups: Vec<String>,
}

impl InventoryHost {
    fn var(&self, names: &[&str]) -> Option<&str> {
        names
            .iter()
            .rev()
            .find_map(|name| self.vars.get(*name))
            .map(String::as_str)
    }

    /// The address to connect to: `ansible_host` (or `ansible_ssh_host`), else the name.
    pub fn address(&self) -> &str {
        self.var(HOST_VARS).unwrap_or(&self.name)
    }

    /// `ansible_port` (or `ansible_ssh_port`). Ansible passes it to `ssh` before
    /// `ansible_ssh_common_args`, and `ssh` keeps the first value, so it wins over a `-p`
    /// in [`ssh_args`](Self::ssh_args).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is not a port number.
    pub fn port(&self) -> Result<Option<u16>> {
        self.var(PORT_VARS)
            .map(|port| {
                port.trim().parse().map_err(|_| Error::InvalidInput {
                    reason: format!(
                        "inventory host {}: ansible_port `{port}` is not a port",
                        self.name
                    ),
                })
            })
            .transpose()
    }

    /// `ansible_user` (or `ansible_ssh_user`); wins over a `-l` in
    /// [`ssh_args`](Self::ssh_args), as in Ansible.
    pub fn user(&self) -> Option<&str> {
        self.var(USER_VARS)
    }

    /// `ansible_ssh_private_key_file` (or `ansible_private_key_file`); Ansible offers it
    /// before the `-i` files of [`ssh_args`](Self::ssh_args).
    pub fn private_key_file(&self) -> Option<PathBuf> {
        self.var(KEY_VARS).map(PathBuf::from)
    }

    /// What `ansible_ssh_common_args` and then `ansible_ssh_extra_args` set, split as a
    /// shell would (Ansible's `shlex.split`): `-J`/`-o ProxyJump=`, `-p`/`-o Port=`,
    /// `-l`/`-o User=`, `-i`/`-o IdentityFile=`, `-o StrictHostKeyChecking=` and
    /// `-o UserKnownHostsFile=`; every other option is listed in
    /// [`ignored`](InventorySshArgs::ignored) so a caller can warn about it.
    ///
    /// Precedence, as `ssh` applies the command line Ansible builds (its own options first,
    /// and the first value of an option wins): [`port`](Self::port) and
    /// [`user`](Self::user) win over the `port` and `user` found here; the
    /// [`private_key_file`](Self::private_key_file) is offered before these identity files.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for unbalanced quotes, an option missing its value, or a port
    /// that is not a number.
    pub fn ssh_args(&self) -> Result<InventorySshArgs> {
        ssh_args::parse(self)
    }
}

impl Default for Inventory {
    fn default() -> Self {
        Self::new()
    }
}

impl Inventory {
    /// An inventory with only the `all` and `ungrouped` groups.
    fn new() -> Self {
        let mut inventory = Inventory {
            hosts: Vec::new(),
            host_names: Vec::new(),
            host_index: HashMap::new(),
            groups: vec![Group::named("all"), Group::named("ungrouped")],
            group_index: HashMap::from([
                ("all".to_owned(), ALL),
                ("ungrouped".to_owned(), UNGROUPED),
            ]),
            adjacent: Vec::new(),
            warnings: Vec::new(),
            rank: Vec::new(),
        };
        // `ungrouped` is a child of `all` from the start, as in `InventoryData`.
        inventory.groups[ALL].children.push(UNGROUPED);
        inventory.groups[UNGROUPED].parents.push(ALL);
        inventory
    }

    /// Reads one inventory source: an INI, YAML or JSON file, an executable inventory
    /// script, a directory of them, or a comma-separated host list (see the
    /// [module documentation](self)), with the `group_vars/` and `host_vars/` beside it.
    /// Blocks while an inventory script runs (at most [`SCRIPT_TIMEOUT`]).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a missing, unreadable or invalid source, a failing
    /// script, or a vault-encrypted value.
    pub fn from_path(path: &Path) -> Result<Self> {
        Self::from_paths(&[path])
    }

    /// Reads several inventory sources into one inventory, as a repeated `ansible -i` does:
    /// in order, later sources adding to earlier ones (a host's later variables replace
    /// earlier ones), with each source's `group_vars/` and `host_vars/` applied in source
    /// order. Blocks while an inventory script runs.
    ///
    /// # Errors
    /// As [`from_path`](Self::from_path); also for an empty list.
    pub fn from_paths<P: AsRef<Path>>(paths: &[P]) -> Result<Self> {
        sources::read(paths, &sources::ReadOptions::default())
    }

    /// Parses an INI inventory.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the line at fault.
    pub fn parse_ini(text: &str) -> Result<Self> {
        let mut inventory = Inventory::new();
        ini::parse(&mut inventory, text).map_err(invalid)?;
        inventory.finish()?;
        Ok(inventory)
    }

    /// Parses a YAML inventory: top-level groups (usually `all`), each with `hosts` (a map of
    /// host names or ranges to their variables), `children` (a map of groups) and `vars`.
    /// `ansible-inventory --list` JSON is accepted too.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for YAML that is invalid or not an inventory.
    pub fn parse_yaml(text: &str) -> Result<Self> {
        let mut inventory = Inventory::new();
        document::parse_inventory_text(&mut inventory, text).map_err(invalid)?;
        inventory.finish()?;
        Ok(inventory)
    }

    /// Parses the JSON `ansible-inventory --list` prints and inventory scripts print:
    /// `{"_meta": {"hostvars": {…}}, "web": {"hosts": […], "vars": {…}, "children": […]}}`
    /// (with or without `_meta`). Needs no crate feature.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for invalid JSON or JSON that is not an inventory.
    pub fn parse_json(text: &str) -> Result<Self> {
        let mut inventory = Inventory::new();
        document::parse_list_json(&mut inventory, text, None).map_err(invalid)?;
        inventory.finish()?;
        Ok(inventory)
    }

    /// Every host name, in order of first definition.
    pub fn host_names(&self) -> &[String] {
        &self.host_names
    }

    /// Every group name (`all` and `ungrouped` included), in name order.
    pub fn group_names(&self) -> impl Iterator<Item = &str> {
        let mut names: Vec<&str> = self.groups.iter().map(|g| g.name.as_str()).collect();
        names.sort_unstable();
        names.into_iter()
    }

    /// What Ansible would have warned about while reading: skipped YAML keys, names that are
    /// both a host and a group, what an inventory script wrote to its standard error.
    pub fn warnings(&self) -> &[String] {
        &self.warnings
    }

    /// The hosts `pattern` selects, in the order `ansible PATTERN --list-hosts` lists them,
    /// with their variables resolved (see the [module documentation](self) for the pattern
    /// language).
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an empty pattern, a term that matches no host or group (a
    /// misspelt exclusion `!canray` must not silently select the canaries), a subscript past
    /// the end of its group, or an invalid regular expression.
    pub fn select(&self, pattern: &str) -> Result<Vec<InventoryHost>> {
        self.select_limited::<&str>(pattern, &[])
    }

    /// The hosts `pattern` selects, narrowed by each of `limits` in turn as `ansible
    /// --limit` narrows them: a limit is a pattern of its own (`web:!canary`,
    /// `~db[0-9]`), and only the hosts it selects are kept, in `pattern`'s order. An element
    /// `@FILE` is a file of patterns, one a line (a failed-hosts file); in it, a line that
    /// matches nothing is skipped, as the hosts of an old retry file may be gone. Ansible
    /// takes one `--limit`; several here narrow each other.
    ///
    /// # Errors
    /// As [`select`](Self::select), for the pattern and every limit; an unreadable `@FILE`.
    pub fn select_limited<S: AsRef<str>>(
        &self,
        pattern: &str,
        limits: &[S],
    ) -> Result<Vec<InventoryHost>> {
        let positions = pattern::select(self, pattern, limits)?;
        Ok(self.resolve(positions.into_iter()))
    }

    /// Keeps only the hosts named in `names` (a failed-hosts file, say), as Ansible's
    /// `--limit @file`. Unknown names are ignored.
    pub fn limit(&self, hosts: &[InventoryHost], names: &[String]) -> Vec<InventoryHost> {
        let names: HashSet<&str> = names.iter().map(String::as_str).collect();
        hosts
            .iter()
            .filter(|h| names.contains(h.name.as_str()))
            .cloned()
            .collect()
    }

    /// One host with its variables resolved, or `None` if the inventory has no such host.
    pub fn host(&self, name: &str) -> Option<InventoryHost> {
        let position = *self.host_index.get(name)?;
        self.resolve(std::iter::once(position)).into_iter().next()
    }

    // ---- building, as ansible-core's `InventoryData` does ----

    /// `InventoryData.add_group`: the group's position, created when new.
    fn add_group(&mut self, name: &str) -> std::result::Result<usize, String> {
        if name.is_empty() {
            return Err("an empty group name".to_owned());
        }
        if let Some(&group) = self.group_index.get(name) {
            return Ok(group);
        }
        let group = self.groups.len();
        self.groups.push(Group::named(name));
        self.group_index.insert(name.to_owned(), group);
        Ok(group)
    }

    /// `InventoryData.add_host`: the host's position, created when new (with `port` as its
    /// `ansible_port`, unless zero), and added to `group`.
    fn add_host(
        &mut self,
        name: &str,
        group: Option<usize>,
        port: Option<&str>,
    ) -> std::result::Result<usize, String> {
        if name.is_empty() {
            return Err("an empty host name".to_owned());
        }
        let host = match self.host_index.get(name) {
            Some(&host) => host,
            None => {
                let host = self.hosts.len();
                let mut vars = BTreeMap::new();
                if let Some(port) = port {
                    let port = literal::canonical_int(false, port);
                    if port != "0" {
                        vars.insert(PORT_VARS[0].to_owned(), port);
                    }
                }
                self.host_names.push(name.to_owned());
                self.hosts.push(Host {
                    vars,
                    groups: Vec::new(),
                });
                self.host_index.insert(name.to_owned(), host);
                host
            }
        };
        if let Some(group) = group {
            self.add_member(group, host);
        }
        Ok(host)
    }

    fn add_member(&mut self, group: usize, host: usize) {
        if !self.hosts[host].groups.contains(&group) {
            self.hosts[host].groups.push(group);
            self.groups[group].hosts.push(host);
        }
    }

    /// `InventoryData.add_child`: a group as a child group, or a host as a member.
    fn add_child(&mut self, parent: usize, child: &str) -> std::result::Result<(), String> {
        if let Some(&group) = self.group_index.get(child) {
            self.add_child_group(parent, group)
        } else if let Some(&host) = self.host_index.get(child) {
            self.add_member(parent, host);
            Ok(())
        } else {
            Err(format!("`{child}` is not a known host nor group"))
        }
    }

    /// `Group.add_child_group`, refusing what would make a group its own descendant.
    fn add_child_group(&mut self, parent: usize, child: usize) -> std::result::Result<(), String> {
        if parent == child {
            return Err(format!(
                "group `{}` cannot be its own child",
                self.groups[child].name
            ));
        }
        if self.groups[parent].children.contains(&child) {
            return Ok(());
        }
        if self.is_ancestor(child, parent) {
            return Err(format!(
                "adding group `{}` as a child of `{}` creates a dependency loop",
                self.groups[child].name, self.groups[parent].name
            ));
        }
        self.groups[parent].children.push(child);
        if !self.groups[child].parents.contains(&parent) {
            self.groups[child].parents.push(parent);
        }
        Ok(())
    }

    /// Whether `ancestor` is a parent of `group`, or a parent's parent, and so on.
    fn is_ancestor(&self, ancestor: usize, group: usize) -> bool {
        let mut stack = vec![group];
        let mut seen = HashSet::new();
        while let Some(g) = stack.pop() {
            for &parent in &self.groups[g].parents {
                if parent == ancestor {
                    return true;
                }
                if seen.insert(parent) {
                    stack.push(parent);
                }
            }
        }
        false
    }

    /// `Group.set_variable`: `ansible_group_priority` sets the priority instead.
    fn set_group_var(
        &mut self,
        group: usize,
        key: &str,
        value: Value,
    ) -> std::result::Result<(), String> {
        if key == "ansible_group_priority" {
            if let Some(priority) = value
                .as_priority()
                .map_err(|e| format!("group `{}`: {e}", self.groups[group].name))?
            {
                self.groups[group].priority = priority;
            }
            return Ok(());
        }
        self.groups[group]
            .vars
            .insert(key.to_owned(), value.into_text());
        Ok(())
    }

    fn set_host_var(&mut self, host: usize, key: &str, value: Value) {
        self.hosts[host]
            .vars
            .insert(key.to_owned(), value.into_text());
    }

    /// `InventoryData.reconcile_inventory`, then what resolving variables needs: groups with
    /// no parent become children of `all`, hosts in no group join `ungrouped` and hosts in
    /// another group leave it; depths and the precedence order of groups.
    fn finish(&mut self) -> Result<()> {
        for group in 0..self.groups.len() {
            if group != ALL && self.groups[group].parents.is_empty() {
                self.add_child_group(ALL, group).map_err(invalid)?;
            }
        }
        let mut leave_ungrouped = HashSet::new();
        for host in 0..self.hosts.len() {
            let groups = self.host_groups(host);
            if groups.contains(&UNGROUPED) {
                if groups.iter().any(|g| *g != ALL && *g != UNGROUPED) {
                    leave_ungrouped.insert(host);
                }
            } else if groups.iter().all(|g| *g == ALL) {
                self.add_member(UNGROUPED, host);
            }
        }
        if !leave_ungrouped.is_empty() {
            self.groups[UNGROUPED]
                .hosts
                .retain(|h| !leave_ungrouped.contains(h));
            for &host in &leave_ungrouped {
                self.hosts[host].groups.retain(|g| *g != UNGROUPED);
            }
        }
        for group in &self.groups {
            if self.host_index.contains_key(&group.name) {
                self.warnings.push(format!(
                    "found both group and host with same name: {}",
                    group.name
                ));
            }
        }
        self.compute_depths();
        let mut order: Vec<usize> = (0..self.groups.len()).collect();
        order.sort_by(|a, b| {
            let (a, b) = (&self.groups[*a], &self.groups[*b]);
            (a.depth, a.priority, &a.name).cmp(&(b.depth, b.priority, &b.name))
        });
        self.rank = vec![0; self.groups.len()];
        for (rank, group) in order.into_iter().enumerate() {
            self.rank[group] = rank;
        }
        Ok(())
    }

    /// Each group's longest path from `all` (Ansible keeps `depth` so while adding edges).
    fn compute_depths(&mut self) {
        // Parents before children: a topological order by repeated relaxation from `all`.
        let mut depth = vec![0usize; self.groups.len()];
        let mut pending_parents: Vec<usize> = self.groups.iter().map(|g| g.parents.len()).collect();
        let mut ready: Vec<usize> = (0..self.groups.len())
            .filter(|g| pending_parents[*g] == 0)
            .collect();
        while let Some(group) = ready.pop() {
            for &child in &self.groups[group].children {
                depth[child] = depth[child].max(depth[group] + 1);
                pending_parents[child] -= 1;
                if pending_parents[child] == 0 {
                    ready.push(child);
                }
            }
        }
        for (group, depth) in self.groups.iter_mut().zip(depth) {
            group.depth = depth;
        }
    }

    /// A host's groups: those listing it, and their ancestors, `all` included.
    fn host_groups(&self, host: usize) -> Vec<usize> {
        let mut found: Vec<usize> = Vec::new();
        let mut stack: Vec<usize> = self.hosts[host].groups.clone();
        while let Some(group) = stack.pop() {
            if !found.contains(&group) {
                found.push(group);
                stack.extend(self.groups[group].parents.iter().copied());
            }
        }
        found
    }

    /// `Group.get_hosts`: the group's hosts, then its descendants' breadth first, each group
    /// once (ansible-core walks each level in the order of a Python `set`; here in the order
    /// the level was reached).
    fn group_hosts(&self, group: usize) -> Vec<usize> {
        let mut ordered = vec![group];
        let mut seen_groups: HashSet<usize> = HashSet::from([group]);
        let mut level: Vec<usize> = Vec::new();
        for &child in &self.groups[group].children {
            if seen_groups.insert(child) {
                ordered.push(child);
                level.push(child);
            }
        }
        while !level.is_empty() {
            let mut next = Vec::new();
            for &parent in &level {
                for &child in &self.groups[parent].children {
                    if seen_groups.insert(child) {
                        ordered.push(child);
                        next.push(child);
                    }
                }
            }
            level = next;
        }
        let mut seen_hosts = HashSet::new();
        ordered
            .iter()
            .flat_map(|g| self.groups[*g].hosts.iter().copied())
            .filter(|h| seen_hosts.insert(*h))
            .collect()
    }

    /// The hosts at `positions`, with variables resolved in Ansible's precedence (see the
    /// [module documentation](self)).
    fn resolve(&self, positions: impl Iterator<Item = usize>) -> Vec<InventoryHost> {
        positions
            .filter_map(|position| {
                let host = self.hosts.get(position)?;
                let mut groups = self.host_groups(position);
                groups.sort_by_key(|g| self.rank.get(*g).copied().unwrap_or(usize::MAX));
                let others: Vec<usize> = groups.iter().copied().filter(|g| *g != ALL).collect();
                let mut vars = self.groups[ALL].vars.clone();
                for &group in &others {
                    extend(&mut vars, &self.groups[group].vars);
                }
                for adjacent in &self.adjacent {
                    if let Some(all) = adjacent.groups.get(&ALL) {
                        extend(&mut vars, all);
                    }
                }
                for adjacent in &self.adjacent {
                    for group in &others {
                        if let Some(group_vars) = adjacent.groups.get(group) {
                            extend(&mut vars, group_vars);
                        }
                    }
                }
                extend(&mut vars, &host.vars);
                for adjacent in &self.adjacent {
                    if let Some(host_vars) = adjacent.hosts.get(&position) {
                        extend(&mut vars, host_vars);
                    }
                }
                let mut names: Vec<String> = groups
                    .iter()
                    .map(|g| self.groups[*g].name.clone())
                    .collect();
                names.sort();
                Some(InventoryHost {
                    name: self.host_names.get(position)?.clone(),
                    vars,
                    groups: names,
                })
            })
            .collect()
    }
}

fn extend(vars: &mut BTreeMap<String, String>, more: &BTreeMap<String, String>) {
    vars.extend(more.iter().map(|(k, v)| (k.clone(), v.clone())));
}

fn invalid(reason: String) -> Error {
    Error::InvalidInput { reason }
}

#[cfg(test)]
mod tests;

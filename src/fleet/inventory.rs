//! Ansible inventories, INI and YAML: groups, `children`, `vars` (`[group:vars]`, host vars),
//! host ranges (`www[001:006]`, `db-[a:c]`, `[1:9:2]`), and host patterns
//! (`web:&prod:!canary`, `all`, `web*`).
//!
//! Of the variables, the fleet uses `ansible_host`, `ansible_port`, `ansible_user` and
//! `ansible_ssh_private_key_file`; every variable is kept for callers. Values are resolved
//! as Ansible does: `all`'s vars, then each group's from the outermost to the innermost
//! (groups of one depth in name order), then the host's own.

use std::{
    collections::{BTreeMap, BTreeSet, HashMap, HashSet},
    path::{Path, PathBuf},
};

use crate::error::{Error, Result};

/// The variables the fleet reads.
const HOST_VAR: &str = "ansible_host";
const PORT_VAR: &str = "ansible_port";
const USER_VAR: &str = "ansible_user";
const KEY_VAR: &str = "ansible_ssh_private_key_file";

/// An Ansible inventory.
#[derive(Debug, Clone, Default)]
pub struct Inventory {
    /// Host names in order of first appearance.
    hosts: Vec<String>,
    /// Each host's position in `hosts`.
    index: HashMap<String, usize>,
    host_vars: HashMap<String, BTreeMap<String, String>>,
    groups: BTreeMap<String, Group>,
}

#[derive(Debug, Clone, Default)]
struct Group {
    hosts: Vec<String>,
    children: Vec<String>,
    vars: BTreeMap<String, String>,
}

/// One host of an inventory, with its variables resolved.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct InventoryHost {
    /// The inventory name.
    pub name: String,
    /// Every variable that applies to the host, resolved.
    pub vars: BTreeMap<String, String>,
    /// The groups it belongs to, directly or through `children`, `all` included, sorted.
    pub groups: Vec<String>,
}

impl InventoryHost {
    /// The address to connect to: `ansible_host`, else the name.
    pub fn address(&self) -> &str {
        self.vars.get(HOST_VAR).map_or(&self.name, String::as_str)
    }

    /// `ansible_port`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] when it is not a port number.
    pub fn port(&self) -> Result<Option<u16>> {
        self.vars
            .get(PORT_VAR)
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

    /// `ansible_user`.
    pub fn user(&self) -> Option<&str> {
        self.vars.get(USER_VAR).map(String::as_str)
    }

    /// `ansible_ssh_private_key_file`.
    pub fn private_key_file(&self) -> Option<PathBuf> {
        self.vars.get(KEY_VAR).map(PathBuf::from)
    }
}

impl Inventory {
    /// Reads an inventory file: YAML when its name ends in `.yml`, `.yaml` or `.json`, or its
    /// text starts like YAML (`---`, `all:`); INI otherwise.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for an unreadable or invalid file.
    pub fn from_path(path: &Path) -> Result<Self> {
        let text = std::fs::read_to_string(path).map_err(|e| Error::InvalidInput {
            reason: format!("cannot read inventory {}: {e}", path.display()),
        })?;
        let yaml_name = path
            .extension()
            .and_then(|e| e.to_str())
            .is_some_and(|e| matches!(e, "yml" | "yaml" | "json"));
        let first = text
            .lines()
            .map(str::trim)
            .find(|l| !l.is_empty() && !l.starts_with('#'))
            .unwrap_or_default();
        let looks_yaml = first.starts_with("---") || first.starts_with('{') || {
            first.ends_with(':') && !first.starts_with('[') && !first.contains(' ')
        };
        if yaml_name || looks_yaml {
            Self::parse_yaml(&text)
        } else {
            Self::parse_ini(&text)
        }
        .map_err(|e| match e {
            Error::InvalidInput { reason } => Error::InvalidInput {
                reason: format!("inventory {}: {reason}", path.display()),
            },
            other => other,
        })
    }

    /// Parses an INI inventory.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] naming the line at fault.
    pub fn parse_ini(text: &str) -> Result<Self> {
        enum Section {
            Hosts(String),
            Children(String),
            Vars(String),
        }
        let mut inventory = Inventory::default();
        let mut section = Section::Hosts("ungrouped".to_owned());
        for (number, raw) in text.lines().enumerate() {
            let at = |what: String| Error::InvalidInput {
                reason: format!("line {}: {what}", number + 1),
            };
            let line = raw.trim();
            if line.is_empty() || line.starts_with('#') || line.starts_with(';') {
                continue;
            }
            if let Some(header) = line.strip_prefix('[') {
                let header = header
                    .split_once(']')
                    .map(|(h, _)| h.trim())
                    .ok_or_else(|| at(format!("`{line}` has no closing `]`")))?;
                section = match header.split_once(':') {
                    Some((group, "children")) => Section::Children(group.to_owned()),
                    Some((group, "vars")) => Section::Vars(group.to_owned()),
                    Some((_, kind)) => return Err(at(format!("unknown section kind `{kind}`"))),
                    None => Section::Hosts(header.to_owned()),
                };
                let (Section::Hosts(group) | Section::Children(group) | Section::Vars(group)) =
                    &section;
                if group.is_empty() {
                    return Err(at("a section without a group name".to_owned()));
                }
                inventory.groups.entry(group.clone()).or_default();
                continue;
            }
            match &section {
                Section::Hosts(group) => {
                    let words = split_words(line).map_err(at)?;
                    let Some((pattern, assignments)) = words.split_first() else {
                        continue;
                    };
                    let mut vars = BTreeMap::new();
                    for assignment in assignments {
                        let (key, value) = assignment
                            .split_once('=')
                            .ok_or_else(|| at(format!("`{assignment}` is not key=value")))?;
                        vars.insert(key.to_owned(), value.to_owned());
                    }
                    // `host:2222` is Ansible's shorthand for ansible_port (not for IPv6).
                    let (pattern, port) = match pattern.rsplit_once(':') {
                        Some((host, port))
                            if !host.contains(':')
                                && !port.is_empty()
                                && port.bytes().all(|b| b.is_ascii_digit()) =>
                        {
                            (host, Some(port))
                        }
                        _ => (pattern.as_str(), None),
                    };
                    if let Some(port) = port {
                        vars.entry(PORT_VAR.to_owned())
                            .or_insert_with(|| port.to_owned());
                    }
                    for host in expand_host_range(pattern).map_err(at)? {
                        inventory.add_host(group, &host, vars.clone());
                    }
                }
                Section::Children(group) => {
                    let child = line.to_owned();
                    inventory.groups.entry(child.clone()).or_default();
                    inventory
                        .groups
                        .entry(group.clone())
                        .or_default()
                        .children
                        .push(child);
                }
                Section::Vars(group) => {
                    let (key, value) = line
                        .split_once('=')
                        .ok_or_else(|| at(format!("`{line}` is not key=value")))?;
                    let value = unquote(value.trim());
                    inventory
                        .groups
                        .entry(group.clone())
                        .or_default()
                        .vars
                        .insert(key.trim().to_owned(), value);
                }
            }
        }
        inventory.check_cycles()?;
        Ok(inventory)
    }

    /// Parses a YAML (or JSON) inventory: top-level groups (usually `all`), each with
    /// `hosts` (a map of names to their vars), `children` (a map of groups) and `vars`.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for YAML that is invalid or not an inventory.
    #[cfg(feature = "yaml")]
    pub fn parse_yaml(text: &str) -> Result<Self> {
        let value: serde_norway::Value =
            serde_norway::from_str(text).map_err(|e| Error::InvalidInput {
                reason: format!("yaml: {e}"),
            })?;
        let mut inventory = Inventory::default();
        match value {
            serde_norway::Value::Mapping(groups) => {
                for (name, group) in groups {
                    let name = yaml_scalar(&name).ok_or_else(|| Error::InvalidInput {
                        reason: "a group name that is not a string".to_owned(),
                    })?;
                    inventory.groups.entry(name.clone()).or_default();
                    inventory.add_yaml_group(&name, &group)?;
                }
            }
            serde_norway::Value::Null => {}
            _ => {
                return Err(Error::InvalidInput {
                    reason: "a YAML inventory is a map of groups".to_owned(),
                });
            }
        }
        inventory.check_cycles()?;
        Ok(inventory)
    }

    /// Without the `yaml` feature, YAML inventories are refused.
    ///
    /// # Errors
    /// Always [`Error::InvalidInput`].
    #[cfg(not(feature = "yaml"))]
    pub fn parse_yaml(_text: &str) -> Result<Self> {
        Err(Error::InvalidInput {
            reason: "YAML inventories need the crate's `yaml` feature".to_owned(),
        })
    }

    #[cfg(feature = "yaml")]
    fn add_yaml_group(&mut self, name: &str, group: &serde_norway::Value) -> Result<()> {
        use serde_norway::Value;
        let bad = |what: &str| Error::InvalidInput {
            reason: format!("group `{name}`: {what}"),
        };
        let group = match group {
            Value::Null => return Ok(()),
            Value::Mapping(map) => map,
            _ => return Err(bad("expected a map with hosts, children or vars")),
        };
        for (key, value) in group {
            match key.as_str() {
                Some("hosts") => match value {
                    Value::Null => {}
                    Value::Mapping(hosts) => {
                        for (host, vars) in hosts {
                            let host = yaml_scalar(host)
                                .ok_or_else(|| bad("a host name that is not a string"))?;
                            let vars = yaml_vars(vars)
                                .map_err(|what| bad(&format!("host `{host}`: {what}")))?;
                            for host in expand_host_range(&host).map_err(|what| bad(&what))? {
                                self.add_host(name, &host, vars.clone());
                            }
                        }
                    }
                    _ => return Err(bad("`hosts` must be a map of host names")),
                },
                Some("children") => match value {
                    Value::Null => {}
                    Value::Mapping(children) => {
                        for (child, body) in children {
                            let child = yaml_scalar(child)
                                .ok_or_else(|| bad("a child name that is not a string"))?;
                            self.groups.entry(child.clone()).or_default();
                            self.groups
                                .entry(name.to_owned())
                                .or_default()
                                .children
                                .push(child.clone());
                            self.add_yaml_group(&child, body)?;
                        }
                    }
                    _ => return Err(bad("`children` must be a map of groups")),
                },
                Some("vars") => {
                    let vars = yaml_vars(value).map_err(|what| bad(&what))?;
                    self.groups
                        .entry(name.to_owned())
                        .or_default()
                        .vars
                        .extend(vars);
                }
                _ => {
                    return Err(bad(&format!(
                        "unknown key `{}`",
                        yaml_scalar(key).unwrap_or_default()
                    )));
                }
            }
        }
        Ok(())
    }

    fn add_host(&mut self, group: &str, host: &str, vars: BTreeMap<String, String>) {
        if !self.index.contains_key(host) {
            self.index.insert(host.to_owned(), self.hosts.len());
            self.hosts.push(host.to_owned());
        }
        self.host_vars
            .entry(host.to_owned())
            .or_default()
            .extend(vars);
        let members = &mut self.groups.entry(group.to_owned()).or_default().hosts;
        if !members.iter().any(|h| h == host) {
            members.push(host.to_owned());
        }
    }

    /// A group that is its own descendant would make membership infinite.
    fn check_cycles(&self) -> Result<()> {
        for name in self.groups.keys() {
            let mut stack: Vec<&str> = self.children_of(name).collect();
            let mut seen = HashSet::new();
            while let Some(group) = stack.pop() {
                if group == name {
                    return Err(Error::InvalidInput {
                        reason: format!("group `{name}` is its own child"),
                    });
                }
                if seen.insert(group) {
                    stack.extend(self.children_of(group));
                }
            }
        }
        Ok(())
    }

    fn children_of<'a>(&'a self, group: &str) -> impl Iterator<Item = &'a str> {
        self.groups
            .get(group)
            .into_iter()
            .flat_map(|g| g.children.iter().map(String::as_str))
    }

    /// Every host name, in order of first appearance.
    pub fn host_names(&self) -> &[String] {
        &self.hosts
    }

    /// Every group name (`all` and `ungrouped` included when they have members).
    pub fn group_names(&self) -> impl Iterator<Item = &str> {
        self.groups.keys().map(String::as_str)
    }

    /// The hosts of `group`, through its children too, in inventory order.
    fn group_hosts(&self, group: &str) -> BTreeSet<usize> {
        if group == "all" {
            return (0..self.hosts.len()).collect();
        }
        let mut found = BTreeSet::new();
        let mut stack = vec![group];
        let mut seen = HashSet::new();
        while let Some(name) = stack.pop() {
            if !seen.insert(name) {
                continue;
            }
            if let Some(g) = self.groups.get(name) {
                found.extend(g.hosts.iter().filter_map(|h| self.position(h)));
                stack.extend(g.children.iter().map(String::as_str));
            }
        }
        found
    }

    fn position(&self, host: &str) -> Option<usize> {
        self.index.get(host).copied()
    }

    /// The hosts a pattern selects, in inventory order: terms separated by `:` or `,`;
    /// a plain term adds a group's or a host's members, `&term` keeps only hosts also in
    /// it, `!term` removes its hosts (as Ansible: unions first, then intersections, then
    /// exclusions, whatever their order). `all` and `*` are every host; `*` and `?` glob
    /// over host and group names.
    ///
    /// # Errors
    /// [`Error::InvalidInput`] for a term that matches no host or group: a misspelt
    /// exclusion (`!canray`) must not silently select the canaries.
    pub fn select(&self, pattern: &str) -> Result<Vec<InventoryHost>> {
        let mut union = BTreeSet::new();
        let mut intersections = Vec::new();
        let mut exclusions = BTreeSet::new();
        for term in pattern
            .split([':', ','])
            .map(str::trim)
            .filter(|t| !t.is_empty())
        {
            if let Some(term) = term.strip_prefix('&') {
                intersections.push(self.term_hosts(term)?);
            } else if let Some(term) = term.strip_prefix('!') {
                exclusions.extend(self.term_hosts(term)?);
            } else {
                union.extend(self.term_hosts(term)?);
            }
        }
        Ok(self.resolve(union.into_iter().filter(|i| {
            intersections.iter().all(|set| set.contains(i)) && !exclusions.contains(i)
        })))
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

    fn term_hosts(&self, term: &str) -> Result<BTreeSet<usize>> {
        if term == "all" || term == "*" {
            return Ok((0..self.hosts.len()).collect());
        }
        let found: BTreeSet<usize> = if term.contains(['*', '?']) {
            let glob = glob::Pattern::new(term).map_err(|e| Error::InvalidInput {
                reason: format!("host pattern `{term}`: {e}"),
            })?;
            let mut found: BTreeSet<usize> = self
                .hosts
                .iter()
                .enumerate()
                .filter(|(_, h)| glob.matches(h))
                .map(|(i, _)| i)
                .collect();
            for group in self.groups.keys().filter(|g| glob.matches(g)) {
                found.extend(self.group_hosts(group));
            }
            found
        } else if self.groups.contains_key(term) {
            self.group_hosts(term)
        } else {
            self.position(term).into_iter().collect()
        };
        if found.is_empty() && !self.groups.contains_key(term) {
            return Err(Error::InvalidInput {
                reason: format!("host pattern term `{term}` matches no host or group"),
            });
        }
        Ok(found)
    }

    /// One host with its variables resolved, or `None` if the inventory has no such host.
    pub fn host(&self, name: &str) -> Option<InventoryHost> {
        self.resolve(self.position(name).into_iter())
            .into_iter()
            .next()
    }

    /// Resolves the hosts at `positions`. Group depths and memberships are computed once,
    /// so resolving many hosts stays linear in the inventory's size.
    fn resolve(&self, positions: impl Iterator<Item = usize>) -> Vec<InventoryHost> {
        // Each group's depth below `all` (top-level groups are 1; the deepest path wins).
        let mut depth: HashMap<&str, usize> = HashMap::new();
        let children: HashSet<&str> = self
            .groups
            .values()
            .flat_map(|g| g.children.iter().map(String::as_str))
            .collect();
        let mut queue: Vec<(&str, usize)> = self
            .groups
            .keys()
            .map(String::as_str)
            .filter(|g| !children.contains(g))
            .map(|g| (g, usize::from(g != "all")))
            .collect();
        while let Some((group, d)) = queue.pop() {
            if depth.get(group).is_some_and(|known| *known >= d) {
                continue;
            }
            depth.insert(group, d);
            queue.extend(self.children_of(group).map(|c| (c, d + 1)));
        }
        let mut groups_of: HashMap<usize, Vec<&str>> = HashMap::new();
        for group in self.groups.keys().filter(|g| *g != "all") {
            for host in self.group_hosts(group) {
                groups_of.entry(host).or_default().push(group);
            }
        }
        positions
            .filter_map(|position| {
                let name = self.hosts.get(position)?;
                let own = self.host_vars.get(name)?;
                let mut groups = groups_of.remove(&position).unwrap_or_default();
                groups.push("all");
                groups.sort_by_key(|g| (depth.get(g).copied().unwrap_or(0), *g));
                let mut vars = BTreeMap::new();
                for group in &groups {
                    if let Some(g) = self.groups.get(*group) {
                        vars.extend(g.vars.iter().map(|(k, v)| (k.clone(), v.clone())));
                    }
                }
                vars.extend(own.iter().map(|(k, v)| (k.clone(), v.clone())));
                let mut groups: Vec<String> = groups.into_iter().map(str::to_owned).collect();
                groups.sort();
                Some(InventoryHost {
                    name: name.clone(),
                    vars,
                    groups,
                })
            })
            .collect()
    }
}

/// Splits an INI host line into words, honouring `'` and `"` quotes.
fn split_words(line: &str) -> std::result::Result<Vec<String>, String> {
    let mut words = Vec::new();
    let mut word = String::new();
    let mut quote = None;
    let mut in_word = false;
    for c in line.chars() {
        match (quote, c) {
            (None, '#') if !in_word => break,
            (None, c) if c.is_whitespace() => {
                if in_word {
                    words.push(std::mem::take(&mut word));
                    in_word = false;
                }
            }
            (None, '"' | '\'') => {
                quote = Some(c);
                in_word = true;
            }
            (Some(q), c) if c == q => quote = None,
            (_, c) => {
                word.push(c);
                in_word = true;
            }
        }
    }
    if quote.is_some() {
        return Err(format!("an unclosed quote in `{line}`"));
    }
    if in_word {
        words.push(word);
    }
    Ok(words)
}

fn unquote(value: &str) -> String {
    for q in ['"', '\''] {
        if let Some(inner) = value.strip_prefix(q).and_then(|v| v.strip_suffix(q)) {
            return inner.to_owned();
        }
    }
    value.to_owned()
}

/// Expands Ansible's host ranges: `www[01:50].example.com`, `db-[a:f]`, `n[1:9:2]`.
fn expand_host_range(pattern: &str) -> std::result::Result<Vec<String>, String> {
    let Some(open) = pattern.find('[') else {
        return Ok(vec![pattern.to_owned()]);
    };
    let close = pattern
        .get(open..)
        .and_then(|rest| rest.find(']'))
        .map(|i| open + i)
        .ok_or_else(|| format!("host range `{pattern}` has no closing `]`"))?;
    let (head, inside, tail) = (
        pattern.get(..open).unwrap_or_default(),
        pattern.get(open + 1..close).unwrap_or_default(),
        pattern.get(close + 1..).unwrap_or_default(),
    );
    let parts: Vec<&str> = inside.split(':').collect();
    let (first, last, step) = match parts.as_slice() {
        [first, last] => (*first, *last, "1"),
        [first, last, step] => (*first, *last, *step),
        _ => {
            return Err(format!(
                "host range `{pattern}`: expected [start:end] or [start:end:step]"
            ));
        }
    };
    let bad = || format!("host range `{pattern}` is not [start:end] of numbers or letters");
    let step: usize = step.parse().ok().filter(|s| *s > 0).ok_or_else(bad)?;
    let values: Vec<String> = match (first.parse::<u64>(), last.parse::<u64>()) {
        (Ok(start), Ok(end)) if start <= end => {
            if (end - start) / step as u64 > 100_000 {
                return Err(format!("host range `{pattern}` is over 100000 hosts"));
            }
            let width = first.len();
            (start..=end)
                .step_by(step)
                .map(|v| format!("{v:0width$}"))
                .collect()
        }
        _ => {
            let (mut a, mut b) = (first.chars(), last.chars());
            match (a.next(), a.next(), b.next(), b.next()) {
                (Some(start), None, Some(end), None)
                    if start.is_ascii_alphabetic() && end.is_ascii_alphabetic() && start <= end =>
                {
                    (start..=end).step_by(step).map(String::from).collect()
                }
                _ => return Err(bad()),
            }
        }
    };
    let mut hosts = Vec::new();
    for value in values {
        // A second range in the tail multiplies out.
        for rest in expand_host_range(tail)? {
            hosts.push(format!("{head}{value}{rest}"));
        }
    }
    Ok(hosts)
}

#[cfg(feature = "yaml")]
fn yaml_scalar(value: &serde_norway::Value) -> Option<String> {
    use serde_norway::Value;
    match value {
        Value::String(s) => Some(s.clone()),
        Value::Number(n) => Some(n.to_string()),
        Value::Bool(b) => Some(b.to_string()),
        _ => None,
    }
}

#[cfg(feature = "yaml")]
fn yaml_vars(value: &serde_norway::Value) -> std::result::Result<BTreeMap<String, String>, String> {
    use serde_norway::Value;
    match value {
        Value::Null => Ok(BTreeMap::new()),
        Value::Mapping(map) => map
            .iter()
            .map(|(k, v)| {
                let key = yaml_scalar(k).ok_or("a variable name that is not a string")?;
                // Lists and maps are kept as their YAML text: the fleet reads scalars only.
                let value = match v {
                    Value::Null => String::new(),
                    other => yaml_scalar(other).unwrap_or_else(|| {
                        serde_norway::to_string(other)
                            .unwrap_or_default()
                            .trim_end()
                            .to_owned()
                    }),
                };
                Ok((key, value))
            })
            .collect(),
        _ => Err("vars must be a map".to_owned()),
    }
}

#[cfg(test)]
mod tests {
    use super::{Inventory, expand_host_range};

    const INI: &str = r#"
# hosts before any section are ungrouped
jump.example.com ansible_port=2200

[web]
web[01:03].example.com
web-canary.example.com ansible_host=10.0.0.9 ansible_user="deploy user"

[db]
db-[a:c] ansible_ssh_private_key_file=~/.ssh/db_key
db-d:2222 ; not a comment in Ansible, but a bad assignment here

[prod:children]
web
db

[web:vars]
ansible_user=www

[prod:vars]
ansible_user = prod
tier=prod

[canary]
web-canary.example.com
"#;

    /// The INI example without its one bad line.
    fn valid_ini() -> Inventory {
        Inventory::parse_ini(
            &INI.replace(" ; not a comment in Ansible, but a bad assignment here", ""),
        )
        .unwrap()
    }

    fn selected(inventory: &Inventory, pattern: &str) -> Vec<String> {
        inventory
            .select(pattern)
            .unwrap()
            .into_iter()
            .map(|h| h.name)
            .collect()
    }

    fn names(hosts: &[super::InventoryHost]) -> Vec<&str> {
        hosts.iter().map(|h| h.name.as_str()).collect()
    }

    #[test]
    fn ini_groups_children_vars_and_ranges() {
        // `db-d:2222 ; ...` is not key=value: the line is refused with its number.
        let error = Inventory::parse_ini(INI).unwrap_err().to_string();
        assert!(error.contains("line 11"), "{error}");
        let inventory = valid_ini();
        let all = inventory.select("all").unwrap();
        assert_eq!(
            names(&all),
            [
                "jump.example.com",
                "web01.example.com",
                "web02.example.com",
                "web03.example.com",
                "web-canary.example.com",
                "db-a",
                "db-b",
                "db-c",
                "db-d"
            ]
        );
        let web01 = inventory.host("web01.example.com").unwrap();
        // The child group's vars win over the parent's.
        assert_eq!(web01.user(), Some("www"));
        assert_eq!(web01.vars.get("tier").map(String::as_str), Some("prod"));
        assert_eq!(web01.address(), "web01.example.com");
        assert_eq!(web01.groups, ["all", "prod", "web"]);
        let canary = inventory.host("web-canary.example.com").unwrap();
        // Host vars win over every group's; quotes are removed.
        assert_eq!(
            (canary.address(), canary.user()),
            ("10.0.0.9", Some("deploy user"))
        );
        let db = inventory.host("db-b").unwrap();
        assert_eq!(db.user(), Some("prod"));
        assert_eq!(
            db.private_key_file().unwrap().to_str(),
            Some("~/.ssh/db_key")
        );
        assert_eq!(inventory.host("db-d").unwrap().port().unwrap(), Some(2222));
        assert_eq!(
            inventory.host("jump.example.com").unwrap().port().unwrap(),
            Some(2200)
        );
        assert_eq!(
            inventory.host("jump.example.com").unwrap().groups,
            ["all", "ungrouped"]
        );
    }

    #[test]
    fn patterns_union_intersect_exclude() {
        let inventory = valid_ini();
        let select = |p: &str| selected(&inventory, p);
        assert_eq!(
            select("web:&prod:!canary"),
            [
                "web01.example.com",
                "web02.example.com",
                "web03.example.com"
            ]
        );
        // Exclusions apply last, whatever their place.
        assert_eq!(select("!canary:web"), select("web:!canary"));
        assert_eq!(
            select("db,jump.example.com"),
            ["jump.example.com", "db-a", "db-b", "db-c", "db-d"]
        );
        assert_eq!(
            select("web0*"),
            [
                "web01.example.com",
                "web02.example.com",
                "web03.example.com"
            ]
        );
        assert_eq!(select("pro?:!web"), ["db-a", "db-b", "db-c", "db-d"]);
        assert_eq!(select("*").len(), 9);
        // A misspelt term is an error, not an empty exclusion.
        let error = inventory.select("web:!canray").unwrap_err().to_string();
        assert!(error.contains("canray"), "{error}");
        let limited = inventory.limit(
            &inventory.select("all").unwrap(),
            &["db-a".into(), "nope".into()],
        );
        assert_eq!(names(&limited), ["db-a"]);
    }

    #[test]
    fn odd_ini_inputs() {
        for (bad, what) in [
            ("[web\nh1", "closing"),
            ("[web:hosts]\nh1", "unknown section kind"),
            ("[web]\nh[1:x]", "not [start:end]"),
            ("[web]\nh[3:1]", "not [start:end]"),
            ("[web]\nh[1:3", "no closing"),
            ("[web]\nh1 user='x", "unclosed quote"),
            ("[a:children]\nb\n[b:children]\na", "its own child"),
            ("[]\nh", "without a group name"),
        ] {
            let error = Inventory::parse_ini(bad).unwrap_err().to_string();
            assert!(error.contains(what), "{bad:?}: {error}");
        }
        let empty = Inventory::parse_ini("# nothing\n\n").unwrap();
        assert!(empty.select("all").unwrap().is_empty());
        // IPv6 addresses are not `host:port`.
        let v6 = Inventory::parse_ini("fe80::1 ansible_user=x").unwrap();
        assert_eq!(v6.host_names(), ["fe80::1"]);
        let bad_port = Inventory::parse_ini("h ansible_port=http").unwrap();
        assert!(bad_port.host("h").unwrap().port().is_err());
    }

    #[test]
    fn host_ranges() {
        assert_eq!(
            expand_host_range("www[001:003]").unwrap(),
            ["www001", "www002", "www003"]
        );
        assert_eq!(
            expand_host_range("n[1:9:4].x").unwrap(),
            ["n1.x", "n5.x", "n9.x"]
        );
        assert_eq!(
            expand_host_range("r[1:2]n[a:b]").unwrap(),
            ["r1na", "r1nb", "r2na", "r2nb"]
        );
        assert!(expand_host_range("n[1:999999]").is_err());
        assert!(expand_host_range("n[1:2:0]").is_err());
    }

    #[cfg(feature = "yaml")]
    #[test]
    fn yaml_groups_children_and_vars() {
        let yaml = r#"
all:
  hosts:
    jump:
      ansible_host: 127.0.0.1
      ansible_port: 2200
  vars:
    ansible_user: base
  children:
    web:
      hosts:
        web[01:02]:
        web-canary:
          ansible_user: canary
      vars:
        ansible_user: www
        sizes: [1, 2]
    prod:
      children:
        web:
        db:
          hosts:
            db1:
      vars:
        tier: prod
"#;
        let inventory = Inventory::parse_yaml(yaml).unwrap();
        let select = |p: &str| selected(&inventory, p);
        assert_eq!(
            select("all"),
            ["jump", "web01", "web02", "web-canary", "db1"]
        );
        assert_eq!(select("prod:!web-canary"), ["web01", "web02", "db1"]);
        let jump = inventory.host("jump").unwrap();
        assert_eq!(
            (jump.address(), jump.port().unwrap(), jump.user()),
            ("127.0.0.1", Some(2200), Some("base"))
        );
        let web = inventory.host("web01").unwrap();
        assert_eq!(web.user(), Some("www"));
        assert_eq!(web.vars.get("tier").map(String::as_str), Some("prod"));
        assert_eq!(web.vars.get("sizes").map(String::as_str), Some("- 1\n- 2"));
        assert_eq!(inventory.host("web-canary").unwrap().user(), Some("canary"));
        assert_eq!(inventory.host("db1").unwrap().user(), Some("base"));
        for (bad, what) in [
            ("- a\n- b", "map of groups"),
            ("all:\n  hosts: [a, b]", "map of host names"),
            ("all:\n  hostz: {}", "unknown key `hostz`"),
            ("all: [", "yaml"),
        ] {
            let error = Inventory::parse_yaml(bad).unwrap_err().to_string();
            assert!(error.contains(what), "{bad:?}: {error}");
        }
    }
}

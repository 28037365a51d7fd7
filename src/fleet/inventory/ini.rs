//! INI inventories, as ansible-core's `ini` inventory plugin reads them.

use super::{
    Inventory,
    address::expand_host_pattern,
    literal::{Value, ini_value, shlex_split},
};

/// A group named before it is declared: a `[group:vars]` section, or a child in a
/// `[parent:children]` section. It must be declared (`[group]` or `[group:children]`) by
/// the end of the file.
struct Pending {
    name: String,
    line: usize,
    kind: PendingKind,
}

enum PendingKind {
    Vars,
    /// The parents that named it, in order.
    Children(Vec<usize>),
}

#[derive(Clone, Copy, PartialEq)]
enum State {
    Hosts,
    Children,
    Vars,
}

/// Parses `text` into `inventory` (without reconciling it). Errors name the line.
pub(super) fn parse(inventory: &mut Inventory, text: &str) -> Result<(), String> {
    let mut pending: Vec<Pending> = Vec::new();
    let mut group = inventory.add_group("ungrouped")?;
    let mut state = State::Hosts;
    for (index, raw) in text.lines().enumerate() {
        let number = index + 1;
        let at = |what: String| format!("line {number}: {what}");
        let line = raw.trim();
        if line.is_empty() || line.starts_with(['#', ';']) {
            continue;
        }
        if let Some((name, kind)) = section(line) {
            let kind = kind.unwrap_or("hosts");
            state = match kind {
                "hosts" => State::Hosts,
                "children" => State::Children,
                "vars" => State::Vars,
                other => {
                    return Err(at(format!(
                        "section [{name}:{other}] has unknown type: {other}"
                    )));
                }
            };
            if !inventory.group_index.contains_key(name) {
                // `[group:vars]` is allowed only for a group declared elsewhere in the file.
                if state == State::Vars && !pending.iter().any(|p| p.name == name) {
                    pending.push(Pending {
                        name: name.to_owned(),
                        line: number,
                        kind: PendingKind::Vars,
                    });
                }
                inventory.add_group(name).map_err(at)?;
            }
            group = inventory.add_group(name).map_err(at)?;
            if state != State::Vars
                && let Some(position) = pending.iter().position(|p| p.name == name)
            {
                if matches!(pending[position].kind, PendingKind::Children(_)) {
                    add_pending_children(inventory, &mut pending, name).map_err(at)?;
                } else {
                    pending.remove(position);
                }
            }
            continue;
        }
        if line.starts_with('[') && line.ends_with(']') {
            return Err(at(format!(
                "invalid section entry: `{line}`; a section has no spaces and no other invalid characters"
            )));
        }
        match state {
            State::Hosts => host_line(inventory, group, line).map_err(at)?,
            State::Vars => {
                let (key, value) = line
                    .split_once('=')
                    .ok_or_else(|| at(format!("expected key=value, got: {line}")))?;
                inventory
                    .set_group_var(group, key.trim(), ini_value(value.trim()))
                    .map_err(at)?;
            }
            State::Children => {
                let child = group_name(line)
                    .ok_or_else(|| at(format!("expected a group name, got: {line}")))?;
                if inventory.group_index.contains_key(child) {
                    inventory.add_child(group, child).map_err(at)?;
                } else if let Some(known) = pending.iter_mut().find(|p| p.name == child) {
                    if let PendingKind::Children(parents) = &mut known.kind {
                        parents.push(group);
                    }
                } else {
                    pending.push(Pending {
                        name: child.to_owned(),
                        line: number,
                        kind: PendingKind::Children(vec![group]),
                    });
                }
            }
        }
    }
    if let Some(first) = pending.first() {
        return Err(match &first.kind {
            PendingKind::Vars => format!(
                "line {}: section [{}:vars] not valid for undefined group `{}`",
                first.line, first.name, first.name
            ),
            PendingKind::Children(parents) => {
                let parent = parents
                    .last()
                    .map(|p| inventory.groups[*p].name.clone())
                    .unwrap_or_default();
                format!(
                    "line {}: section [{parent}:children] includes undefined group `{}`",
                    first.line, first.name
                )
            }
        });
    }
    Ok(())
}

/// `_add_pending_children`: a group named as a child before its declaration joins the
/// parents that named it.
fn add_pending_children(
    inventory: &mut Inventory,
    pending: &mut Vec<Pending>,
    name: &str,
) -> Result<(), String> {
    let Some(position) = pending.iter().position(|p| p.name == name) else {
        return Ok(());
    };
    let entry = pending.remove(position);
    if let PendingKind::Children(parents) = entry.kind {
        for parent in parents {
            inventory.add_child(parent, name)?;
            let parent_name = inventory.groups[parent].name.clone();
            if pending
                .iter()
                .any(|p| p.name == parent_name && matches!(p.kind, PendingKind::Children(_)))
            {
                add_pending_children(inventory, pending, &parent_name)?;
            }
        }
    }
    Ok(())
}

/// `^\[([^:\]\s]+)(?::(\w+))?\]\s*(?:#.*)?$`: a section header's group and kind.
fn section(line: &str) -> Option<(&str, Option<&str>)> {
    let rest = line.strip_prefix('[')?;
    let name_end = rest
        .find(|c: char| c == ':' || c == ']' || c.is_whitespace())
        .unwrap_or(rest.len());
    let (name, mut rest) = rest.split_at(name_end);
    if name.is_empty() {
        return None;
    }
    let mut kind = None;
    if let Some(after) = rest.strip_prefix(':') {
        let end = after
            .find(|c: char| !(c.is_alphanumeric() || c == '_'))
            .unwrap_or(after.len());
        if end == 0 {
            return None;
        }
        kind = Some(&after[..end]);
        rest = &after[end..];
    }
    let rest = rest.strip_prefix(']')?.trim_start();
    (rest.is_empty() || rest.starts_with('#')).then_some((name, kind))
}

/// `^([^:\]\s]+)\s*(?:#.*)?$`: a child group's name.
fn group_name(line: &str) -> Option<&str> {
    let end = line
        .find(|c: char| c == ':' || c == ']' || c.is_whitespace())
        .unwrap_or(line.len());
    let (name, rest) = line.split_at(end);
    let rest = rest.trim_start();
    (!name.is_empty() && (rest.is_empty() || rest.starts_with('#'))).then_some(name)
}

/// `_parse_host_definition` and `_populate_host_vars`: a host pattern (with ranges and a
/// port), then `key=value` variables.
fn host_line(inventory: &mut Inventory, group: usize, line: &str) -> Result<(), String> {
    let tokens = shlex_split(line, true)
        .map_err(|e| format!("error parsing host definition `{line}`: {e}"))?;
    let Some((pattern, assignments)) = tokens.split_first() else {
        return Ok(());
    };
    let (hosts, port) = expand_host_pattern(pattern)?;
    if pattern.trim().ends_with(':') && port.is_none() {
        return Err(format!(
            "invalid host pattern `{pattern}`: ending in `:` is not allowed, `:` introduces a port"
        ));
    }
    if hosts.iter().any(|h| h.trim() == "---") {
        return Err(format!(
            "invalid host pattern `{pattern}`: `---` is normally a sign this is a YAML file"
        ));
    }
    let mut vars: Vec<(&str, Value)> = Vec::new();
    for assignment in assignments {
        let (key, value) = assignment.split_once('=').ok_or_else(|| {
            format!("expected key=value host variable assignment, got: {assignment}")
        })?;
        vars.push((key, ini_value(value)));
    }
    for name in hosts {
        let host = inventory.add_host(&name, Some(group), port.as_deref())?;
        for (key, value) in &vars {
            inventory.set_host_var(host, key, value.clone());
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::{group_name, section};

    #[test]
    fn headers() {
        assert_eq!(section("[web]"), Some(("web", None)));
        assert_eq!(section("[web:vars]  # c"), Some(("web", Some("vars"))));
        assert_eq!(section("[web:hosts]"), Some(("web", Some("hosts"))));
        assert_eq!(section("[web:]"), None);
        assert_eq!(section("[web x]"), None);
        assert_eq!(section("[web] ; c"), None);
        assert_eq!(section("[]"), None);
        assert_eq!(group_name("web # c"), Some("web"));
        assert_eq!(group_name("web ; c"), None);
        assert_eq!(group_name("web:x"), None);
    }
}

//! YAML and JSON documents: YAML inventories (ansible-core's `yaml` plugin), the
//! `ansible-inventory --list` JSON inventory scripts print (the `script` plugin), and
//! `group_vars`/`host_vars` files.

use std::{collections::BTreeMap, fmt};

use serde::{
    Deserialize, Deserializer, Serialize, Serializer,
    de::{MapAccess, SeqAccess, Visitor},
    ser::{SerializeMap, SerializeSeq},
};

use super::{
    Inventory,
    address::expand_host_pattern,
    literal::{Value, canonical_int},
};

/// JSON with the order of object keys kept (Python's `json.loads` keeps it, and group and
/// host order follows it), whatever features `serde_json` was built with.
#[derive(Debug, Clone, PartialEq)]
pub(super) enum Json {
    Null,
    Bool(bool),
    Number(serde_json::Number),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl<'de> Deserialize<'de> for Json {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        deserializer.deserialize_any(JsonVisitor)
    }
}

struct JsonVisitor;

impl<'de> Visitor<'de> for JsonVisitor {
    type Value = Json;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<Json, E> {
        Ok(Json::Bool(v))
    }

    fn visit_i64<E>(self, v: i64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_u64<E>(self, v: u64) -> Result<Json, E> {
        Ok(Json::Number(v.into()))
    }

    fn visit_f64<E>(self, v: f64) -> Result<Json, E> {
        Ok(serde_json::Number::from_f64(v).map_or(Json::Null, Json::Number))
    }

    fn visit_str<E>(self, v: &str) -> Result<Json, E> {
        Ok(Json::String(v.to_owned()))
    }

    fn visit_string<E>(self, v: String) -> Result<Json, E> {
        Ok(Json::String(v))
    }

    fn visit_unit<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_none<E>(self) -> Result<Json, E> {
        Ok(Json::Null)
    }

    fn visit_some<D: Deserializer<'de>>(self, deserializer: D) -> Result<Json, D::Error> {
        Json::deserialize(deserializer)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Json, A::Error> {
        let mut items = Vec::new();
        while let Some(item) = seq.next_element()? {
            items.push(item);
        }
        Ok(Json::Array(items))
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Json, A::Error> {
        let mut entries: Vec<(String, Json)> = Vec::new();
        while let Some((key, value)) = map.next_entry::<String, Json>()? {
            // A repeated key keeps its first place and its last value, as a Python dict.
            match entries.iter_mut().find(|(k, _)| *k == key) {
                Some(entry) => entry.1 = value,
                None => entries.push((key, value)),
            }
        }
        Ok(Json::Object(entries))
    }
}

impl Serialize for Json {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        match self {
            Json::Null => serializer.serialize_unit(),
            Json::Bool(b) => serializer.serialize_bool(*b),
            Json::Number(n) => n.serialize(serializer),
            Json::String(s) => serializer.serialize_str(s),
            Json::Array(items) => {
                let mut seq = serializer.serialize_seq(Some(items.len()))?;
                for item in items {
                    seq.serialize_element(item)?;
                }
                seq.end()
            }
            Json::Object(entries) => {
                let mut map = serializer.serialize_map(Some(entries.len()))?;
                for (k, v) in entries {
                    map.serialize_entry(k, v)?;
                }
                map.end()
            }
        }
    }
}

/// A parsed YAML or JSON document.
pub(super) enum Document {
    #[cfg(feature = "yaml")]
    Yaml(serde_norway::Value),
    Json(Json),
}

impl Document {
    /// YAML (a superset of JSON) with the `yaml` feature; JSON only without it.
    pub(super) fn parse(text: &str) -> Result<Self, String> {
        #[cfg(feature = "yaml")]
        {
            let mut value: serde_norway::Value =
                serde_norway::from_str(text).map_err(|e| format!("yaml: {e}"))?;
            value
                .apply_merge()
                .map_err(|e| format!("yaml merge keys (`<<`): {e}"))?;
            Ok(Document::Yaml(value))
        }
        #[cfg(not(feature = "yaml"))]
        {
            if text.trim().is_empty() {
                return Ok(Document::Json(Json::Null));
            }
            serde_json::from_str(text).map(Document::Json).map_err(|_| {
                "YAML needs the crate's `yaml` feature (without it, only JSON is read)".to_owned()
            })
        }
    }

    pub(super) fn parse_json(text: &str) -> Result<Self, String> {
        serde_json::from_str(text)
            .map(Document::Json)
            .map_err(|e| format!("invalid JSON: {e}"))
    }

    pub(super) fn root(&self) -> Node<'_> {
        match self {
            #[cfg(feature = "yaml")]
            Document::Yaml(value) => Node::Yaml(value),
            Document::Json(value) => Node::Json(value),
        }
    }
}

/// A node of a [`Document`].
#[derive(Clone, Copy)]
pub(super) enum Node<'a> {
    #[cfg(feature = "yaml")]
    Yaml(&'a serde_norway::Value),
    Json(&'a Json),
    /// A JSON object's key.
    Key(&'a str),
}

/// Why a value cannot be kept.
pub(super) enum Refused {
    Vault,
}

impl<'a> Node<'a> {
    /// The node without its YAML tag (`!unsafe` and the like); `None` for a `!vault` value.
    fn untagged(self) -> Option<Self> {
        match self {
            #[cfg(feature = "yaml")]
            Node::Yaml(serde_norway::Value::Tagged(tagged)) => {
                if tagged.tag == "vault" {
                    None
                } else {
                    Node::Yaml(&tagged.value).untagged()
                }
            }
            // `ansible-inventory --list` JSON read by the YAML parser.
            #[cfg(feature = "yaml")]
            Node::Yaml(serde_norway::Value::Mapping(map)) if map.len() == 1 => {
                match map.iter().next().map(|(k, v)| (k.as_str(), v)) {
                    Some((Some("__ansible_vault"), _)) => None,
                    Some((Some("__ansible_unsafe"), inner)) => Some(Node::Yaml(inner)),
                    _ => Some(self),
                }
            }
            Node::Json(Json::Object(entries)) if entries.len() == 1 => {
                match entries.first().map(|(k, v)| (k.as_str(), v)) {
                    Some(("__ansible_vault", _)) => None,
                    Some(("__ansible_unsafe", inner)) => Some(Node::Json(inner)),
                    _ => Some(self),
                }
            }
            other => Some(other),
        }
    }

    pub(super) fn is_null(self) -> bool {
        match self.untagged() {
            #[cfg(feature = "yaml")]
            Some(Node::Yaml(v)) => v.is_null(),
            Some(Node::Json(v)) => matches!(v, Json::Null),
            Some(Node::Key(_)) | None => false,
        }
    }

    pub(super) fn as_str(self) -> Option<&'a str> {
        match self.untagged()? {
            #[cfg(feature = "yaml")]
            Node::Yaml(v) => v.as_str(),
            Node::Json(Json::String(s)) => Some(s),
            Node::Key(s) => Some(s),
            Node::Json(_) => None,
        }
    }

    pub(super) fn is_map(self) -> bool {
        self.entries().is_some()
    }

    pub(super) fn entries(self) -> Option<Vec<(Node<'a>, Node<'a>)>> {
        match self.untagged()? {
            #[cfg(feature = "yaml")]
            Node::Yaml(serde_norway::Value::Mapping(map)) => Some(
                map.iter()
                    .map(|(k, v)| (Node::Yaml(k), Node::Yaml(v)))
                    .collect(),
            ),
            Node::Json(Json::Object(entries)) => Some(
                entries
                    .iter()
                    .map(|(k, v)| (Node::Key(k), Node::Json(v)))
                    .collect(),
            ),
            _ => None,
        }
    }

    pub(super) fn items(self) -> Option<Vec<Node<'a>>> {
        match self.untagged()? {
            #[cfg(feature = "yaml")]
            Node::Yaml(serde_norway::Value::Sequence(items)) => {
                Some(items.iter().map(Node::Yaml).collect())
            }
            Node::Json(Json::Array(items)) => Some(items.iter().map(Node::Json).collect()),
            _ => None,
        }
    }

    pub(super) fn get(self, key: &str) -> Option<Node<'a>> {
        self.entries()?
            .into_iter()
            .find(|(k, _)| k.as_str() == Some(key))
            .map(|(_, v)| v)
    }

    /// Python's truthiness: null, false, 0, "", [] and {} are false.
    pub(super) fn is_truthy(self) -> bool {
        match self.untagged() {
            None => true,
            #[cfg(feature = "yaml")]
            Some(Node::Yaml(v)) => {
                use serde_norway::Value as Y;
                match v {
                    Y::Null => false,
                    Y::Bool(b) => *b,
                    Y::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                    Y::String(s) => !s.is_empty(),
                    Y::Sequence(s) => !s.is_empty(),
                    Y::Mapping(m) => !m.is_empty(),
                    Y::Tagged(_) => true,
                }
            }
            Some(Node::Json(v)) => match v {
                Json::Null => false,
                Json::Bool(b) => *b,
                Json::Number(n) => n.as_f64().is_some_and(|f| f != 0.0),
                Json::String(s) => !s.is_empty(),
                Json::Array(a) => !a.is_empty(),
                Json::Object(o) => !o.is_empty(),
            },
            Some(Node::Key(s)) => !s.is_empty(),
        }
    }

    /// The Python type name of the value, for messages.
    pub(super) fn type_name(self) -> &'static str {
        let Some(node) = self.untagged() else {
            return "vault-encrypted value";
        };
        if node.is_null() {
            "NoneType"
        } else if node.as_str().is_some() {
            "str"
        } else if node.items().is_some() {
            "list"
        } else if node.is_map() {
            "dict"
        } else {
            match node.value() {
                Ok(Value::Bool(_)) => "bool",
                Ok(Value::Int(_)) => "int",
                Ok(Value::Float(_)) => "float",
                _ => "value",
            }
        }
    }

    /// A scalar key as text (YAML allows numbers and booleans as keys).
    pub(super) fn key_text(self) -> Option<String> {
        match self.value().ok()? {
            Value::Composite(_) => None,
            value => Some(value.into_text()),
        }
    }

    /// The value, typed; lists and maps as text.
    pub(super) fn value(self) -> Result<Value, Refused> {
        if self.contains_vault() {
            return Err(Refused::Vault);
        }
        let Some(node) = self.untagged() else {
            return Err(Refused::Vault);
        };
        Ok(match node {
            #[cfg(feature = "yaml")]
            Node::Yaml(v) => {
                use serde_norway::Value as Y;
                match v {
                    Y::Null => Value::Null,
                    Y::Bool(b) => Value::Bool(*b),
                    Y::Number(n) if n.is_i64() || n.is_u64() => Value::Int(n.to_string()),
                    Y::Number(n) => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
                    Y::String(s) => Value::Str(s.clone()),
                    other => Value::Composite(
                        serde_norway::to_string(other)
                            .unwrap_or_default()
                            .trim_end()
                            .to_owned(),
                    ),
                }
            }
            Node::Json(v) => match v {
                Json::Null => Value::Null,
                Json::Bool(b) => Value::Bool(*b),
                Json::Number(n) => match (n.as_i64(), n.as_u64()) {
                    (Some(i), _) => Value::Int(canonical_int(i < 0, &i.unsigned_abs().to_string())),
                    (None, Some(u)) => Value::Int(u.to_string()),
                    _ => Value::Float(n.as_f64().unwrap_or(f64::NAN)),
                },
                Json::String(s) => Value::Str(s.clone()),
                other => Value::Composite(serde_json::to_string(other).unwrap_or_default()),
            },
            Node::Key(s) => Value::Str(s.to_owned()),
        })
    }

    fn contains_vault(self) -> bool {
        let Some(node) = self.untagged() else {
            return true;
        };
        if let Some(items) = node.items() {
            return items.into_iter().any(Node::contains_vault);
        }
        if let Some(entries) = node.entries() {
            return entries.into_iter().any(|(_, v)| v.contains_vault());
        }
        false
    }
}

/// The error for a vault-encrypted variable.
fn vault(variable: &str, owner: &str) -> String {
    format!(
        "variable `{variable}` of {owner} is vault-encrypted: Ansible Vault is not supported \
         (decrypt it, or set it another way)"
    )
}

/// A variable's name and value from a map entry.
fn variable(key: Node<'_>, value: Node<'_>, owner: &str) -> Result<(String, Value), String> {
    let name = key
        .key_text()
        .ok_or_else(|| format!("{owner}: a variable name that is not a string"))?;
    let value = value
        .value()
        .map_err(|Refused::Vault| vault(&name, owner))?;
    Ok((name, value))
}

/// Whether a document is the `ansible-inventory --list` format (it has the top-level
/// `_meta` that format always has) rather than the yaml plugin's.
fn is_list_format(root: Node<'_>) -> bool {
    root.get("_meta").is_some()
}

/// A YAML (or JSON) inventory file: the yaml plugin's format, or the `--list` JSON.
pub(super) fn parse_inventory_text(inventory: &mut Inventory, text: &str) -> Result<(), String> {
    let document = Document::parse(text)?;
    let root = document.root();
    if is_list_format(root) {
        parse_list(inventory, root, None)
    } else {
        parse_yaml_inventory(inventory, root)
    }
}

/// What runs `SCRIPT --host NAME` for a script whose `--list` output has no `_meta`.
pub(super) type HostVarsFetcher<'f> = &'f mut dyn FnMut(&str) -> Result<String, String>;

/// The `--list` JSON an inventory script prints.
pub(super) fn parse_list_json(
    inventory: &mut Inventory,
    text: &str,
    fetch: Option<HostVarsFetcher<'_>>,
) -> Result<(), String> {
    let document = Document::parse_json(text)?;
    parse_list(inventory, document.root(), fetch)
}

/// The script plugin's `parse`: every top-level key but `_meta` is a group; host variables
/// come from `_meta.hostvars` (or from `--host` when there is no `_meta`).
fn parse_list(
    inventory: &mut Inventory,
    root: Node<'_>,
    mut fetch: Option<HostVarsFetcher<'_>>,
) -> Result<(), String> {
    let entries = root
        .entries()
        .ok_or_else(|| format!("the inventory is a {} instead of a dict", root.type_name()))?;
    let mut listed = Vec::new();
    let mut meta = None;
    for (key, data) in entries {
        let name = key
            .as_str()
            .ok_or_else(|| "a group name that is not a string".to_owned())?;
        if name == "_meta" {
            let hostvars = data
                .get("hostvars")
                .filter(|h| h.is_map())
                .ok_or_else(|| "`_meta.hostvars` is missing or not a dict".to_owned())?;
            meta = Some(hostvars);
        } else {
            list_group(inventory, name, data, &mut listed)?;
        }
    }
    for host in listed {
        let name = inventory.host_names[host].clone();
        let fetched: Document;
        let vars = match (meta, fetch.as_mut()) {
            (Some(meta), _) => meta.get(&name),
            (None, Some(fetch)) => {
                let text = fetch(&name)?;
                if text.trim().is_empty() {
                    None
                } else {
                    fetched = Document::parse_json(&text)
                        .map_err(|e| format!("`--host {name}` output: {e}"))?;
                    Some(fetched.root())
                }
            }
            (None, None) => None,
        };
        let Some(vars) = vars else {
            continue;
        };
        let owner = format!("host `{name}`");
        let entries = vars.entries().ok_or_else(|| {
            format!(
                "the variables of {owner} are a {} instead of a dict",
                vars.type_name()
            )
        })?;
        for (key, value) in entries {
            let (key, value) = variable(key, value, &owner)?;
            inventory.set_host_var(host, &key, value);
        }
    }
    Ok(())
}

/// The script plugin's `_parse_group`.
fn list_group(
    inventory: &mut Inventory,
    name: &str,
    data: Node<'_>,
    listed: &mut Vec<usize>,
) -> Result<(), String> {
    let group = inventory.add_group(name)?;
    let (hosts, vars, children) = if !data.is_map() {
        // A bare list of hosts (deprecated in Ansible, still read).
        (Some(Err(data)), None, None)
    } else if ["hosts", "vars", "children"]
        .iter()
        .all(|k| data.get(k).is_none())
    {
        // A map of neither: the group is its own sole host, the map its variables.
        (Some(Ok(name.to_owned())), Some(data), None)
    } else {
        (
            data.get("hosts").map(Err),
            data.get("vars"),
            data.get("children"),
        )
    };
    let host_names: Vec<String> = match hosts {
        None => Vec::new(),
        Some(Ok(own)) => vec![own],
        Some(Err(node)) => node
            .items()
            .ok_or_else(|| format!("`{name}.hosts` is a {} instead of a list", node.type_name()))?
            .into_iter()
            .map(|h| {
                h.as_str()
                    .map(str::to_owned)
                    .ok_or_else(|| format!("`{name}.hosts` has a host name that is not a string"))
            })
            .collect::<Result<_, _>>()?,
    };
    for host in host_names {
        let host = inventory.add_host(&host, Some(group), None)?;
        if !listed.contains(&host) {
            listed.push(host);
        }
    }
    if let Some(vars) = vars {
        let owner = format!("group `{name}`");
        let entries = vars
            .entries()
            .ok_or_else(|| format!("`{name}.vars` is a {} instead of a dict", vars.type_name()))?;
        for (key, value) in entries {
            let (key, value) = variable(key, value, &owner)?;
            inventory.set_group_var(group, &key, value)?;
        }
    }
    if let Some(children) = children {
        let names: Vec<String> = if let Some(items) = children.items() {
            items
                .into_iter()
                .map(|c| {
                    c.as_str().map(str::to_owned).ok_or_else(|| {
                        format!("`{name}.children` has a group name that is not a string")
                    })
                })
                .collect::<Result<_, _>>()?
        } else if let Some(entries) = children.entries() {
            entries
                .into_iter()
                .map(|(k, _)| k.key_text().unwrap_or_default())
                .collect()
        } else if let Some(text) = children.as_str() {
            // Python iterates a string by character.
            text.chars().map(String::from).collect()
        } else {
            return Err(format!(
                "`{name}.children` is a {} instead of a list",
                children.type_name()
            ));
        };
        for child in names {
            inventory.add_group(&child)?;
            inventory.add_child(group, &child)?;
        }
    }
    Ok(())
}

/// The yaml plugin's `parse`: top-level keys are groups.
fn parse_yaml_inventory(inventory: &mut Inventory, root: Node<'_>) -> Result<(), String> {
    if !root.is_truthy() {
        return Err("an empty YAML inventory".to_owned());
    }
    let entries = root.entries().ok_or_else(|| {
        format!(
            "a YAML inventory is a map of groups, not a {}",
            root.type_name()
        )
    })?;
    if let Some(plugin) = root.get("plugin").filter(|p| p.is_truthy()) {
        return Err(format!(
            "`plugin: {}`: inventory plugin configurations are not supported (only INI, YAML, \
             JSON and inventory scripts are)",
            plugin.key_text().unwrap_or_default()
        ));
    }
    for (key, data) in entries {
        yaml_group(inventory, key, data)?;
    }
    Ok(())
}

/// The yaml plugin's `_parse_group`; the group's name.
fn yaml_group(inventory: &mut Inventory, key: Node<'_>, data: Node<'_>) -> Result<String, String> {
    let name = key
        .as_str()
        .ok_or_else(|| {
            format!(
                "group name `{}` is not a string",
                key.key_text().unwrap_or_default()
            )
        })?
        .to_owned();
    if !(data.is_map() || data.is_null()) {
        inventory
            .warnings
            .push(format!("skipping `{name}`: not a valid group definition"));
        return Ok(name);
    }
    let group = inventory.add_group(&name)?;
    let Some(entries) = data.entries() else {
        return Ok(name);
    };
    const SECTIONS: [&str; 3] = ["vars", "children", "hosts"];
    for section in SECTIONS {
        if let Some(value) = data.get(section)
            && !(value.as_str().is_some() || value.is_map() || value.is_null())
        {
            return Err(format!(
                "invalid `{section}` entry for group `{name}`: a dictionary is required, found a {}",
                value.type_name()
            ));
        }
    }
    for (key, value) in entries {
        let section = key.as_str().filter(|k| SECTIONS.contains(k));
        // A string stands for a map of that one key: `hosts: web1`, `children: web`.
        let members: Vec<(Node<'_>, Option<Node<'_>>)> = match (section, value.as_str()) {
            (Some(_), Some(_)) => vec![(value, None)],
            _ => match value.entries() {
                Some(entries) => entries.into_iter().map(|(k, v)| (k, Some(v))).collect(),
                None if value.is_null() => continue,
                None => {
                    inventory.warnings.push(format!(
                        "skipping key `{}` in group `{name}`: it is a {}, not a mapping",
                        key.key_text().unwrap_or_default(),
                        value.type_name()
                    ));
                    continue;
                }
            },
        };
        match section {
            Some("vars") => {
                let owner = format!("group `{name}`");
                for (var, value) in members {
                    let (var, value) = match value {
                        Some(value) => variable(var, value, &owner)?,
                        None => (var.key_text().unwrap_or_default(), Value::Null),
                    };
                    inventory.set_group_var(group, &var, value)?;
                }
            }
            Some("children") => {
                for (child, body) in members {
                    let child = match body {
                        Some(body) => yaml_group(inventory, child, body)?,
                        None => {
                            let child = child.as_str().unwrap_or_default().to_owned();
                            inventory.add_group(&child)?;
                            child
                        }
                    };
                    inventory.add_child(group, &child)?;
                }
            }
            Some("hosts") => {
                for (pattern, vars) in members {
                    let pattern = pattern.as_str().ok_or_else(|| {
                        format!(
                            "host pattern `{}` must be a string: enclose numbers in quotes",
                            pattern.key_text().unwrap_or_default()
                        )
                    })?;
                    let (hosts, port) = expand_host_pattern(pattern)?;
                    let owner = format!("host `{pattern}`");
                    let vars = match vars.filter(|v| v.is_truthy()) {
                        None => Vec::new(),
                        Some(vars) => vars
                            .entries()
                            .ok_or_else(|| {
                                format!(
                                    "the variables of {owner} are a {} instead of a dict",
                                    vars.type_name()
                                )
                            })?
                            .into_iter()
                            .map(|(k, v)| variable(k, v, &owner))
                            .collect::<Result<Vec<_>, _>>()?,
                    };
                    for host in hosts {
                        let host = inventory.add_host(&host, Some(group), port.as_deref())?;
                        for (key, value) in &vars {
                            inventory.set_host_var(host, key, value.clone());
                        }
                    }
                }
            }
            _ => inventory.warnings.push(format!(
                "skipping unexpected key `{}` in group `{name}`: only `vars`, `children` and \
                 `hosts` are valid",
                key.key_text().unwrap_or_default()
            )),
        }
    }
    Ok(name)
}

/// A `group_vars`/`host_vars` file: a map of variables (an empty or false document is
/// none).
pub(super) fn parse_vars_file(text: &str) -> Result<BTreeMap<String, String>, String> {
    if text.trim_start().starts_with("$ANSIBLE_VAULT;") {
        return Err(
            "the file is vault-encrypted: Ansible Vault is not supported (decrypt it)".to_owned(),
        );
    }
    let document = Document::parse(text)?;
    let root = document.root();
    if !root.is_truthy() {
        return Ok(BTreeMap::new());
    }
    let entries = root
        .entries()
        .ok_or_else(|| format!("expected a map of variables, found a {}", root.type_name()))?;
    entries
        .into_iter()
        .map(|(key, value)| variable(key, value, "this file").map(|(k, v)| (k, v.into_text())))
        .collect()
}

//! Parsing edge cases, sources, scripts, variables and ssh arguments. The orders asserted
//! here are those ansible-core 2.19 prints (checked with `ansible PATTERN --list-hosts`);
//! tests/inventory_ansible.rs compares against ansible-core itself on generated
//! inventories.

use std::{path::Path, time::Duration};

use super::{Inventory, InventoryHost, sources};

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
    Inventory::parse_ini(&INI.replace(" ; not a comment in Ansible, but a bad assignment here", ""))
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

fn names(hosts: &[InventoryHost]) -> Vec<&str> {
    hosts.iter().map(|h| h.name.as_str()).collect()
}

fn write(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    let path = dir.join(name);
    if let Some(parent) = path.parent() {
        std::fs::create_dir_all(parent).unwrap();
    }
    std::fs::write(&path, text).unwrap();
    path
}

#[cfg(unix)]
fn executable(dir: &Path, name: &str, text: &str) -> std::path::PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let path = write(dir, name, text);
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    path
}

#[test]
fn ini_groups_children_vars_and_ranges() {
    // `db-d:2222 ; ...`: `;` is not key=value; the line is refused with its number.
    let error = Inventory::parse_ini(INI).unwrap_err().to_string();
    assert!(error.contains("line 11"), "{error}");
    let inventory = valid_ini();
    // `all` lists `ungrouped`, then the top-level groups (`prod`, `canary`), then their
    // children: web-canary comes with `canary`, before `prod`'s children.
    assert_eq!(
        selected(&inventory, "all"),
        [
            "jump.example.com",
            "web-canary.example.com",
            "web01.example.com",
            "web02.example.com",
            "web03.example.com",
            "db-a",
            "db-b",
            "db-c",
            "db-d"
        ]
    );
    assert_eq!(
        inventory.host_names()[..2],
        ["jump.example.com", "web01.example.com"]
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
    let jump = inventory.host("jump.example.com").unwrap();
    assert_eq!(jump.port().unwrap(), Some(2200));
    assert_eq!(jump.groups, ["all", "ungrouped"]);
}

#[test]
fn patterns_like_ansible() {
    let inventory = valid_ini();
    let select = |p: &str| selected(&inventory, p);
    let web3 = [
        "web01.example.com",
        "web02.example.com",
        "web03.example.com",
    ];
    assert_eq!(select("web:&prod:!canary"), web3);
    // Exclusions apply last, whatever their place.
    assert_eq!(select("!canary:web"), web3);
    // Unions keep the order the terms were given in.
    assert_eq!(
        select("db,jump.example.com"),
        ["db-a", "db-b", "db-c", "db-d", "jump.example.com"]
    );
    assert_eq!(select("web0*"), web3);
    assert_eq!(select("pro?:!web"), ["db-a", "db-b", "db-c", "db-d"]);
    assert_eq!(select("*").len(), 9);
    assert_eq!(select("web[0]"), ["web01.example.com"]);
    assert_eq!(select("web[-1]"), ["web-canary.example.com"]);
    assert_eq!(
        select("web[1:2]"),
        ["web02.example.com", "web03.example.com"]
    );
    assert_eq!(
        select("web[1:]"),
        [
            "web02.example.com",
            "web03.example.com",
            "web-canary.example.com"
        ]
    );
    // An end of 0 is read as a single index, as Ansible does.
    assert_eq!(select("prod[2:0]"), ["web03.example.com"]);
    assert_eq!(select("~db-[ab]"), ["db-a", "db-b"]);
    assert_eq!(select("~^DB|web-c"), ["web-canary.example.com"]);
    // A misspelt term is an error, not an empty exclusion; so is `web[:3]` (a wildcard).
    for (bad, what) in [
        ("web:!canray", "canray"),
        ("web[:3]", "web[:3]"),
        ("web[9]", "past the 4 hosts"),
        ("", "empty"),
        ("web:!", "empty"),
        ("~(", "regular expression"),
        ("localhost", "implicit localhost"),
    ] {
        let error = inventory.select(bad).unwrap_err().to_string();
        assert!(error.contains(what), "{bad:?}: {error}");
    }
    // Only exclusions: from `all`.
    assert_eq!(select("!prod"), ["jump.example.com"]);
    // Limits narrow in turn; `@file` lines that match nothing are skipped.
    let limited = inventory
        .select_limited("all", &["prod", "web:db-a", "!web03.example.com"])
        .unwrap();
    assert_eq!(
        names(&limited),
        [
            "web-canary.example.com",
            "web01.example.com",
            "web02.example.com",
            "db-a"
        ]
    );
    let dir = tempfile::tempdir().unwrap();
    let retry = write(
        dir.path(),
        "web.retry",
        "web02.example.com\ngone.example.com\n\n",
    );
    let limited = inventory
        .select_limited("web", &[format!("@{}", retry.display())])
        .unwrap();
    assert_eq!(names(&limited), ["web02.example.com"]);
    assert!(inventory.select_limited("web", &["nope"]).is_err());
    let limited = inventory.limit(
        &inventory.select("all").unwrap(),
        &["db-a".into(), "nope".into()],
    );
    assert_eq!(names(&limited), ["db-a"]);
}

#[test]
fn wildcards_also_match_hosts_and_subscripts_count_duplicates() {
    let inventory =
        Inventory::parse_ini("[web]\nw1\nw2\n[webdb]\nw2\nd1\n[other]\nweb9\n[weird]\nweb\n")
            .unwrap();
    // `web*` matches the groups web and webdb (w1 w2 w2 d1) and the hosts web9 and web:
    // the subscript counts the duplicate, as Ansible's does.
    assert_eq!(
        selected(&inventory, "web*"),
        ["w1", "w2", "d1", "web9", "web"]
    );
    assert_eq!(selected(&inventory, "web*[3]"), ["d1"]);
    assert_eq!(selected(&inventory, "web*[4]"), ["web9"]);
    // A host named like a group: the exact host name wins for a plain term.
    assert_eq!(selected(&inventory, "web"), ["web"]);
    assert_eq!(selected(&inventory, "weird:&web"), Vec::<String>::new());
    assert!(
        inventory
            .warnings()
            .iter()
            .any(|w| w.contains("same name: web"))
    );
}

#[test]
fn odd_ini_inputs() {
    for (bad, what) in [
        ("[web\nh1", "host range"),
        ("[web:foo]\nh1", "unknown type"),
        ("[web]\nh[1:x]", "not a number"),
        ("[web]\nh[1:3", "host range"),
        ("[web]\nh1 user='x", "no closing quotation"),
        ("[a:children]\nb\n[b:children]\na", "dependency loop"),
        ("[]\nh", "invalid section"),
        (
            "[p:children]\nundeclared",
            "includes undefined group `undeclared`",
        ),
        ("[x:vars]\na=1", "not valid for undefined group `x`"),
        ("[web]\nh:", "ending in `:`"),
        ("---\nall:", "YAML"),
        ("[web:vars]\nnovalue", "key=value"),
    ] {
        let error = Inventory::parse_ini(bad).unwrap_err().to_string();
        assert!(error.contains(what), "{bad:?}: {error}");
    }
    let empty = Inventory::parse_ini("# nothing\n\n; nothing either\n").unwrap();
    assert!(empty.select("all").unwrap().is_empty());
    // A reversed range is empty, not an error.
    let reversed = Inventory::parse_ini("[web]\nh[3:1]\n").unwrap();
    assert!(reversed.select("web").unwrap().is_empty());
    // `[x:vars]` before `[x]` is fine once `[x]` comes; children may come before their
    // declaration.
    let later = Inventory::parse_ini("[x:vars]\na=1\n[p:children]\nx\n[x]\nh\n").unwrap();
    assert_eq!(
        later.host("h").unwrap().vars.get("a").map(String::as_str),
        Some("1")
    );
    assert_eq!(selected(&later, "p"), ["h"]);
    // IPv6 addresses are not `host:port`; `[v6]:port` is.
    let v6 = Inventory::parse_ini("fe80::1 ansible_user=x\n[::1]:2200\n").unwrap();
    assert_eq!(v6.host_names(), ["fe80::1", "::1"]);
    assert_eq!(v6.host("::1").unwrap().port().unwrap(), Some(2200));
    let bad_port = Inventory::parse_ini("h ansible_port=http").unwrap();
    assert!(bad_port.host("h").unwrap().port().is_err());
    // Values are typed as `ast.literal_eval` types them, then kept as text.
    let typed = Inventory::parse_ini(
        "h a=5 b=True c='quoted' d=\"two words\" e=[1,2] f=None g=0x10 i=1.50\n[all:vars]\nz = 'x' # c\n",
    )
    .unwrap();
    let vars = typed.host("h").unwrap().vars;
    let get = |k: &str| vars.get(k).map(String::as_str);
    assert_eq!(
        [
            get("a"),
            get("b"),
            get("c"),
            get("d"),
            get("e"),
            get("f"),
            get("g"),
            get("i"),
            get("z")
        ],
        [
            Some("5"),
            Some("true"),
            Some("quoted"),
            Some("two words"),
            Some("[1,2]"),
            Some(""),
            Some("16"),
            Some("1.5"),
            Some("x")
        ]
    );
}

#[test]
fn group_priority_orders_groups_of_one_depth() {
    let inventory = Inventory::parse_ini(
        "[a]\nh\n[b]\nh\n[a:vars]\nx=a\nansible_group_priority=10\n[b:vars]\nx=b\n",
    )
    .unwrap();
    // Same depth: the higher priority applies last and wins (without it, `b` would).
    let host = inventory.host("h").unwrap();
    assert_eq!(host.vars.get("x").map(String::as_str), Some("a"));
    assert!(!host.vars.contains_key("ansible_group_priority"));
    assert!(Inventory::parse_ini("[a]\nh\n[a:vars]\nansible_group_priority=high\n").is_err());
}

#[test]
fn connection_variable_aliases() {
    let inventory = Inventory::parse_ini(
        "h ansible_host=a ansible_ssh_host=b ansible_port=1 ansible_ssh_port=2 ansible_user=u \
         ansible_ssh_user=v ansible_private_key_file=k1 ansible_ssh_private_key_file=k2\n",
    )
    .unwrap();
    let host = inventory.host("h").unwrap();
    assert_eq!(host.address(), "b");
    assert_eq!(host.port().unwrap(), Some(2));
    assert_eq!(host.user(), Some("v"));
    assert_eq!(host.private_key_file().unwrap().to_str(), Some("k2"));
}

#[test]
fn ssh_args_are_parsed_like_ssh() {
    let inventory = Inventory::parse_ini(concat!(
        "h ansible_ssh_common_args='-o ProxyJump=jump@bastion:2222 -p2200 -l ops -C ",
        "-o \"StrictHostKeyChecking accept-new\" -o UserKnownHostsFile=\"/k1 /k2\" ",
        "-o ControlPersist=60s -i ~/.ssh/a' ",
        "ansible_ssh_extra_args='-J other -p 2300 -o IdentityFile=/b -o port=2400 -At -F /cfg x'\n",
        "bad ansible_ssh_common_args='-p'\n",
        "worse ansible_ssh_common_args='-o Port=http'\n",
        "none\n",
    ))
    .unwrap();
    let args = inventory.host("h").unwrap().ssh_args().unwrap();
    assert_eq!(args.proxy_jump.as_deref(), Some("jump@bastion:2222"));
    // The first value wins, as in ssh.
    assert_eq!(args.port, Some(2200));
    assert_eq!(args.user.as_deref(), Some("ops"));
    assert_eq!(
        args.identity_files,
        [
            Path::new("~/.ssh/a").to_path_buf(),
            Path::new("/b").to_path_buf()
        ]
    );
    assert_eq!(args.strict_host_key_checking.as_deref(), Some("accept-new"));
    assert_eq!(
        args.known_hosts_files,
        [
            Path::new("/k1").to_path_buf(),
            Path::new("/k2").to_path_buf()
        ]
    );
    assert_eq!(
        args.ignored,
        ["-C", "-o ControlPersist=60s", "-A", "-t", "-F /cfg", "x"]
    );
    for bad in ["bad", "worse"] {
        let error = inventory
            .host(bad)
            .unwrap()
            .ssh_args()
            .unwrap_err()
            .to_string();
        assert!(error.contains("ansible_ssh_common_args"), "{error}");
    }
    assert_eq!(
        inventory.host("none").unwrap().ssh_args().unwrap(),
        super::InventorySshArgs::default()
    );
}

#[test]
fn list_json_from_scripts_and_files() {
    let json = r#"{
        "_meta": {"hostvars": {"w1": {"ansible_host": "10.0.0.1", "n": 5, "f": 1.5, "l": [1, "a"]}}},
        "all": {"children": ["ungrouped", "web", "db"]},
        "web": {"hosts": ["w1", "w2"], "vars": {"role": "web", "ansible_group_priority": 3}},
        "db": ["d1"],
        "odd": {"x": 1}
    }"#;
    let inventory = Inventory::parse_json(json).unwrap();
    assert_eq!(selected(&inventory, "all"), ["w1", "w2", "d1", "odd"]);
    let w1 = inventory.host("w1").unwrap();
    assert_eq!(w1.address(), "10.0.0.1");
    assert_eq!(w1.vars.get("role").map(String::as_str), Some("web"));
    assert_eq!(w1.vars.get("n").map(String::as_str), Some("5"));
    assert_eq!(w1.vars.get("f").map(String::as_str), Some("1.5"));
    assert_eq!(w1.vars.get("l").map(String::as_str), Some(r#"[1,"a"]"#));
    // A group with neither hosts, vars nor children is its own sole host (as in Ansible).
    assert_eq!(
        inventory
            .host("odd")
            .unwrap()
            .vars
            .get("x")
            .map(String::as_str),
        Some("1")
    );
    for (bad, what) in [
        ("[1]", "instead of a dict"),
        (r#"{"_meta": {}}"#, "_meta.hostvars"),
        (r#"{"web": {"hosts": "w1"}}"#, "instead of a list"),
        (
            r#"{"web": {"vars": {"s": {"__ansible_vault": "$ANSIBLE_VAULT;1.1;AES256"}}}}"#,
            "vault",
        ),
        ("{", "invalid JSON"),
    ] {
        let error = Inventory::parse_json(bad).unwrap_err().to_string();
        assert!(error.contains(what), "{bad:?}: {error}");
    }
    // The same JSON from a plain file (Ansible reads it only from a script).
    let dir = tempfile::tempdir().unwrap();
    let path = write(dir.path(), "inventory.json", json);
    let from_file = Inventory::from_path(&path).unwrap();
    assert_eq!(selected(&from_file, "web"), ["w1", "w2"]);
    let vaulted = write(
        dir.path(),
        "vaulted.json",
        r#"{"_meta": {"hostvars": {"h": {"s": {"__ansible_vault": "$ANSIBLE_VAULT;1.1"}}}}, "g": {"hosts": ["h"]}}"#,
    );
    let error = Inventory::from_path(&vaulted).unwrap_err().to_string();
    assert!(
        error.contains("`s` of host `h` is vault-encrypted"),
        "{error}"
    );
}

#[cfg(unix)]
#[test]
fn inventory_scripts_run_with_list_and_host() {
    let dir = tempfile::tempdir().unwrap();
    let with_meta = executable(
        dir.path(),
        "meta.sh",
        "#!/bin/sh\n[ \"$1\" = --list ] || exit 3\necho warming up >&2\n\
         echo '{\"_meta\": {\"hostvars\": {\"w1\": {\"ansible_port\": 2201}}}, \"web\": {\"hosts\": [\"w1\", \"w2\"]}}'\n",
    );
    let inventory = Inventory::from_path(&with_meta).unwrap();
    assert_eq!(selected(&inventory, "web"), ["w1", "w2"]);
    assert_eq!(inventory.host("w1").unwrap().port().unwrap(), Some(2201));
    assert!(
        inventory
            .warnings()
            .iter()
            .any(|w| w.contains("warming up")),
        "{:?}",
        inventory.warnings()
    );
    // No `_meta`: `--host NAME` for each host, as Ansible does.
    let per_host = executable(
        dir.path(),
        "per_host.sh",
        "#!/bin/sh\nif [ \"$1\" = --list ]; then echo '{\"web\": [\"w1\", \"w2\"]}';\n\
         elif [ \"$2\" = w1 ]; then echo '{\"role\": \"first\"}'; fi\n",
    );
    let inventory = Inventory::from_path(&per_host).unwrap();
    assert_eq!(
        inventory
            .host("w1")
            .unwrap()
            .vars
            .get("role")
            .map(String::as_str),
        Some("first")
    );
    assert!(inventory.host("w2").unwrap().vars.is_empty());
}

#[cfg(unix)]
#[test]
fn failing_inventory_scripts_are_clear_errors() {
    let dir = tempfile::tempdir().unwrap();
    let bad_json = executable(
        dir.path(),
        "bad.sh",
        "#!/bin/sh\necho 'cannot reach the CMDB' >&2\necho '{\"web\": '\n",
    );
    let error = Inventory::from_path(&bad_json).unwrap_err().to_string();
    assert!(error.contains("invalid JSON"), "{error}");
    assert!(error.contains("cannot reach the CMDB"), "{error}");
    let failing = executable(
        dir.path(),
        "fail.sh",
        "#!/bin/sh\necho 'no token' >&2\nexit 2\n",
    );
    let error = Inventory::from_path(&failing).unwrap_err().to_string();
    assert!(
        error.contains("exit status: 2") && error.contains("no token"),
        "{error}"
    );
    // A script that hangs is killed at the timeout (1 s here; 30 s by default).
    let hanging = executable(
        dir.path(),
        "hang.sh",
        "#!/bin/sh\necho 'still thinking' >&2\nsleep 30\necho '{}'\n",
    );
    let started = std::time::Instant::now();
    let options = sources::ReadOptions {
        script_timeout: Duration::from_secs(1),
    };
    let error = sources::read(&[&hanging], &options)
        .unwrap_err()
        .to_string();
    assert!(error.contains("did not finish within 1s"), "{error}");
    assert!(error.contains("still thinking"), "{error}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
}

#[cfg(unix)]
#[test]
fn files_without_an_execute_bit_are_never_run() {
    let dir = tempfile::tempdir().unwrap();
    let marker = dir.path().join("ran");
    // Valid INI and a shell script at once: run, it would create `ran`.
    let text = format!("#!/bin/sh\n[web]\nh1 x=>{}\n", marker.display());
    let plain = write(dir.path(), "inventory", &text);
    let inventory = Inventory::from_path(&plain).unwrap();
    assert!(!marker.exists());
    assert_eq!(selected(&inventory, "web"), ["h1"]);
    assert_eq!(
        inventory.host("h1").unwrap().vars.get("x").cloned(),
        Some(format!(">{}", marker.display()))
    );
    // With the execute bit it is a script (which fails: `[web]` is no command).
    let script = executable(dir.path(), "script", &text);
    let error = Inventory::from_path(&script).unwrap_err().to_string();
    assert!(error.contains("--list` failed"), "{error}");
    assert!(marker.exists());
    // An executable file that is no script (no `#!`) is parsed, as Ansible falls back.
    let no_shebang = executable(dir.path(), "plain-x", "[db]\nd1\n");
    assert_eq!(
        selected(&Inventory::from_path(&no_shebang).unwrap(), "db"),
        ["d1"]
    );
}

#[test]
fn directories_group_vars_and_host_vars() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path();
    write(
        d,
        "10-web.ini",
        "[web]\nw1\nw2\n[web:vars]\nsource=inline\nlevel=web-inline\n",
    );
    write(
        d,
        "20-prod",
        "[prod:children]\nweb\n[prod:vars]\nlevel=prod-inline\n[all:vars]\nlevel=all-inline\n",
    );
    // Ignored: extensions Ansible skips, hidden files, backups.
    write(d, "notes.md", "not an inventory");
    write(d, "old.retry", "x y z");
    write(d, "hosts.txt", "x y z");
    write(d, "backup~", "x y z");
    write(d, ".hidden", "x y z");
    if cfg!(feature = "yaml") {
        write(d, "sub/30-db.yml", "db:\n  hosts:\n    d1:\n");
    } else {
        write(d, "sub/30-db.ini", "[db]\nd1\n");
    }
    // `all` < parent < child < host; group_vars files over inline vars; `all`'s file over
    // every group's inline vars (Ansible's precedence). JSON is YAML too, and needs no
    // feature.
    write(
        d,
        "group_vars/all.yml",
        r#"{"from_all_file": "yes-all", "level": "all-file"}"#,
    );
    write(d, "group_vars/prod.yml", r#"{"level": "prod-file"}"#);
    write(
        d,
        "group_vars/prod.yaml",
        r#"{"ignored": "the .yml one wins"}"#,
    );
    write(d, "group_vars/web/10.yml", r#"{"level": "web-file"}"#);
    write(d, "group_vars/web/20.json", r#"{"json": 1}"#);
    write(d, "group_vars/web/skip.txt", r#"{"not": "read"}"#);
    write(d, "host_vars/w2", r#"{"level": "host-file"}"#);
    write(d, "group_vars/empty.yml", "");
    let inventory = Inventory::from_path(d).unwrap();
    assert_eq!(selected(&inventory, "all"), ["d1", "w1", "w2"]);
    let w1 = inventory.host("w1").unwrap();
    let get = |h: &InventoryHost, k: &str| h.vars.get(k).cloned();
    assert_eq!(get(&w1, "level").as_deref(), Some("web-file"));
    assert_eq!(get(&w1, "source").as_deref(), Some("inline"));
    assert_eq!(get(&w1, "json").as_deref(), Some("1"));
    assert_eq!(get(&w1, "not"), None);
    assert_eq!(get(&w1, "ignored"), None);
    assert_eq!(get(&w1, "from_all_file").as_deref(), Some("yes-all"));
    assert_eq!(
        get(&inventory.host("w2").unwrap(), "level").as_deref(),
        Some("host-file")
    );
    // d1's groups have no file but `all`'s, which beats every inline group var.
    assert_eq!(
        get(&inventory.host("d1").unwrap(), "level").as_deref(),
        Some("all-file")
    );

    // A file source reads the group_vars beside it; several sources merge in order.
    let other = tempfile::tempdir().unwrap();
    let second = write(other.path(), "hosts.ini", "[web]\nw1 extra=1\nw3\n");
    write(
        other.path(),
        "group_vars/web.yml",
        r#"{"level": "second-web-file"}"#,
    );
    let merged = Inventory::from_paths(&[d, second.as_path()]).unwrap();
    assert_eq!(selected(&merged, "web"), ["w1", "w2", "w3"]);
    let w1 = merged.host("w1").unwrap();
    assert_eq!(get(&w1, "level").as_deref(), Some("second-web-file"));
    assert_eq!(get(&w1, "extra").as_deref(), Some("1"));
    assert!(Inventory::from_paths::<&Path>(&[]).is_err());
    assert!(Inventory::from_path(&d.join("missing")).is_err());
}

#[test]
fn host_lists() {
    let inventory = Inventory::from_path(Path::new("web1,web2:2222,[::1]:22,")).unwrap();
    assert_eq!(inventory.host_names(), ["web1", "web2", "::1"]);
    assert_eq!(inventory.host("web2").unwrap().port().unwrap(), Some(2222));
    assert_eq!(inventory.host("web1").unwrap().groups, ["all", "ungrouped"]);
}

#[test]
fn vault_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let vaulted = write(
        dir.path(),
        "vaulted.yml",
        "$ANSIBLE_VAULT;1.1;AES256\n6162636465\n",
    );
    let error = Inventory::from_path(&vaulted).unwrap_err().to_string();
    assert!(error.contains("vault"), "{error}");
    let inventory = write(dir.path(), "hosts", "[web]\nw1\n");
    write(
        dir.path(),
        "group_vars/web.yml",
        "$ANSIBLE_VAULT;1.1;AES256\n6162636465\n",
    );
    let error = Inventory::from_path(&inventory).unwrap_err().to_string();
    assert!(
        error.contains("web.yml") && error.contains("vault-encrypted"),
        "{error}"
    );
    #[cfg(feature = "yaml")]
    {
        std::fs::write(
            dir.path().join("group_vars/web.yml"),
            "db_password: !vault |\n  $ANSIBLE_VAULT;1.1;AES256\n  6162\n",
        )
        .unwrap();
        let error = Inventory::from_path(&inventory).unwrap_err().to_string();
        assert!(
            error.contains("`db_password`") && error.contains("Vault is not supported"),
            "{error}"
        );
        let error = Inventory::parse_yaml(
            "all:\n  hosts:\n    h:\n      secret: !vault |\n        $ANSIBLE_VAULT;1.1;AES256\n        6162\n",
        )
        .unwrap_err()
        .to_string();
        assert!(error.contains("`secret` of host `h`"), "{error}");
    }
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
        ratio: 0.5
        on: true
    prod:
      children:
        web:
        db:
          hosts: db1
      vars:
        tier: prod
      hostz: {}
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
    assert_eq!(jump.groups, ["all", "ungrouped"]);
    let web = inventory.host("web01").unwrap();
    assert_eq!(web.user(), Some("www"));
    assert_eq!(web.vars.get("tier").map(String::as_str), Some("prod"));
    assert_eq!(web.vars.get("sizes").map(String::as_str), Some("- 1\n- 2"));
    assert_eq!(web.vars.get("ratio").map(String::as_str), Some("0.5"));
    assert_eq!(web.vars.get("on").map(String::as_str), Some("true"));
    assert_eq!(inventory.host("web-canary").unwrap().user(), Some("canary"));
    assert_eq!(inventory.host("db1").unwrap().user(), Some("base"));
    // Unknown keys are skipped with a warning, as Ansible skips them.
    assert!(
        inventory.warnings().iter().any(|w| w.contains("hostz")),
        "{:?}",
        inventory.warnings()
    );
    for (bad, what) in [
        ("- a\n- b", "map of groups"),
        ("all:\n  hosts: [a, b]", "dictionary is required"),
        ("all:\n  hosts:\n    h: [1]", "instead of a dict"),
        ("all: [", "yaml"),
        ("plugin: aws_ec2\n", "not supported"),
        ("all:\n  hosts:\n    5:\n", "must be a string"),
        ("", "empty"),
    ] {
        let error = Inventory::parse_yaml(bad).unwrap_err().to_string();
        assert!(error.contains(what), "{bad:?}: {error}");
    }
}

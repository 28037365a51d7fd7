#!/usr/bin/env python3
"""Tests of .ci/check-layers.py: small crates laid out in a temporary directory, each with
one way of importing upwards, which the checker must catch (and the allowed forms, which it
must let pass). Run: python3 .ci/test_check_layers.py (exit 1 on a failure)."""
import importlib.util
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
spec = importlib.util.spec_from_file_location("check_layers", os.path.join(HERE, "check-layers.py"))
check_layers = importlib.util.module_from_spec(spec)
spec.loader.exec_module(check_layers)

LIB = """// Layers, bottom up: error < command < fleet
mod command;
mod error;
pub mod fleet;
pub use fleet::{Fleet, FleetEvent};
pub use command::Execution;
"""
COMMAND = """// Layers, bottom up: quote < wrapper < drive
mod drive;
mod quote;
mod wrapper;
pub(crate) use drive::launch;
pub(crate) use wrapper::{direct_text, wrapper};
pub struct Execution;
"""
BASE = {
    "lib.rs": LIB,
    "error.rs": "pub struct Error;\n",
    "command/mod.rs": COMMAND,
    "command/quote.rs": "use crate::error::Error;\npub fn quote() {}\n",
    "command/wrapper.rs": "use super::quote::quote;\npub fn wrapper() {}\npub fn direct_text() {}\n",
    "command/drive.rs": "use crate::command::{direct_text, wrapper};\nuse super::quote;\npub fn launch() {}\n",
    "fleet/mod.rs": "use crate::{command::Execution, error::Error};\npub struct Fleet;\npub enum FleetEvent {}\n",
}


def problems(changes):
    files = dict(BASE)
    files.update(changes)
    with tempfile.TemporaryDirectory() as src:
        for rel, text in files.items():
            path = os.path.join(src, rel)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)
        return check_layers.check(src)


CAUGHT = {
    "a plain upward path": {"command/quote.rs": "use crate::fleet::Fleet;\n"},
    "a name the crate root re-exports": {"command/quote.rs": "use crate::Fleet;\n"},
    "a re-export in a group": {"command/quote.rs": "use crate::{error::Error, FleetEvent};\n"},
    "super::super to the root": {"command/quote.rs": "use super::super::fleet::Fleet;\n"},
    "an inline path in code": {"command/quote.rs": "pub fn f() { let _ = crate::fleet::Fleet; }\n"},
    "code after a test module": {
        "command/quote.rs": "#[cfg(test)]\nmod tests {\n    use crate::fleet::Fleet;\n}\n\npub fn f() -> crate::Fleet { todo!() }\n"
    },
    "inside command: super to a higher sibling": {"command/quote.rs": "use super::drive::launch;\n"},
    "inside command: a name its facade re-exports": {"command/quote.rs": "use crate::command::launch;\n"},
    "inside command: self from the facade's level": {"command/wrapper.rs": "use crate::command::{drive, quote};\n"},
    "a module missing from the line": {"lib.rs": LIB + "mod extra;\n", "extra.rs": "\n"},
}
ALLOWED = {
    "the layout as it is": {},
    "a comment or a string": {"command/quote.rs": "// crate::fleet::Fleet\n/* crate::Fleet */\npub const S: &str = \"crate::fleet\";\n"},
    "a test module": {"command/quote.rs": "#[cfg(test)]\nmod tests {\n    use crate::Fleet;\n    use super::super::drive::launch;\n}\n"},
    "a lower layer through a re-export": {"fleet/mod.rs": "use crate::Execution;\npub struct Fleet;\npub enum FleetEvent {}\n"},
    "its own module": {"command/drive.rs": "use crate::command::launch;\nuse super::super::command::drive;\npub fn launch() {}\n"},
}

failures = 0
for name, changes in CAUGHT.items():
    found = problems(changes)
    if not found:
        print(f"FAIL not caught: {name}")
        failures += 1
for name, changes in ALLOWED.items():
    found = problems(changes)
    if found:
        print(f"FAIL refused: {name}: {found}")
        failures += 1
passed = len(CAUGHT) + len(ALLOWED) - failures
print(f"{passed} passed, {failures} failed")
sys.exit(1 if failures else 0)

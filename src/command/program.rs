//! Splitting a command the way LocalExecutor does: `sh -c` text or a `#!` script.

/// What the user asked to run, split the way LocalExecutor splits it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Program {
    /// `sh -c <command>` with stdin at EOF.
    Shell(String),
    /// A `#!` script: the interpreter (found through `PATH`), at most one argument, and the
    /// body that is written to the interpreter's stdin.
    Script {
        interpreter: String,
        argument: Option<String>,
        body: Vec<u8>,
    },
}

impl Program {
    /// Parses a command exactly as LocalExecutor 0.33 does: a shebang only at byte 0, the
    /// directive trimmed, the interpreter up to the first whitespace, the rest (trimmed) one
    /// argument, the body everything after the first newline.
    pub(crate) fn parse(command: &str) -> Program {
        if let Some(rest) = command.strip_prefix("#!") {
            let (first_line, body) = match rest.split_once('\n') {
                Some((line, body)) => (line, body),
                None => (rest, ""),
            };
            let directive = first_line.trim();
            let (interpreter, argument) = match directive.split_once(char::is_whitespace) {
                Some((interpreter, argument)) => (interpreter, Some(argument.trim())),
                None => (directive, None),
            };
            if !interpreter.is_empty() {
                return Program::Script {
                    interpreter: interpreter.to_owned(),
                    argument: argument.filter(|a| !a.is_empty()).map(str::to_owned),
                    body: body.as_bytes().to_vec(),
                };
            }
        }
        Program::Shell(command.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn shebang_parsing_matches_local_executor() {
        assert_eq!(
            Program::parse("#!/bin/sh -e\nprintf a\n"),
            Program::Script {
                interpreter: "/bin/sh".into(),
                argument: Some("-e".into()),
                body: b"printf a\n".to_vec()
            }
        );
        assert_eq!(
            Program::parse("#!/usr/bin/env -S sh -e \r\nx"),
            Program::Script {
                interpreter: "/usr/bin/env".into(),
                argument: Some("-S sh -e".into()),
                body: b"x".to_vec()
            }
        );
        assert_eq!(
            Program::parse("#!python3"),
            Program::Script {
                interpreter: "python3".into(),
                argument: None,
                body: Vec::new()
            }
        );
        assert_eq!(
            Program::parse("#!\necho"),
            Program::Shell("#!\necho".into())
        );
        assert_eq!(
            Program::parse(" #!/bin/bash\necho"),
            Program::Shell(" #!/bin/bash\necho".into())
        );
    }
}

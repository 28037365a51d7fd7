//! The environment plan: LocalExecutor's `env_clear`, `env_remove` and `envs`, validated.

use crate::error::{Error, Result};

/// Whether `name` is a portable environment variable name (`[A-Za-z_][A-Za-z0-9_]*`).
fn is_valid_env_name(name: &str) -> bool {
    let mut bytes = name.bytes();
    matches!(bytes.next(), Some(b) if b == b'_' || b.is_ascii_alphabetic())
        && bytes.all(|b| b == b'_' || b.is_ascii_alphanumeric())
}

/// Environment changes applied before the user's program starts, in LocalExecutor's order:
/// clear, then remove, then set.
#[derive(Debug, Clone, Default)]
pub(crate) struct EnvPlan {
    pub(crate) clear: bool,
    pub(crate) remove: Vec<String>,
    pub(crate) set: Vec<(String, String)>,
}

impl EnvPlan {
    /// Checks names (a clear error instead of a remote syntax error) and values (no NUL).
    pub(crate) fn validate(&self) -> Result<()> {
        for name in self
            .remove
            .iter()
            .chain(self.set.iter().map(|(name, _)| name))
        {
            if !is_valid_env_name(name) {
                return Err(Error::InvalidInput {
                    reason: format!(
                        "environment variable name {name:?} is not valid \
                         (letters, digits and '_', not starting with a digit)"
                    ),
                });
            }
        }
        for (name, value) in &self.set {
            reject_nul(
                &format!("the value of environment variable {name}"),
                value.as_bytes(),
            )?;
        }
        Ok(())
    }
}

/// Refuses a value with a NUL byte, which no argv or environment entry can carry.
pub(crate) fn reject_nul(what: &str, value: &[u8]) -> Result<()> {
    if value.contains(&0) {
        return Err(Error::InvalidInput {
            reason: format!("{what} contains a NUL byte, which cannot be passed to a remote shell"),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn env_names_are_checked() {
        assert!(is_valid_env_name("PATH"));
        assert!(is_valid_env_name("_x1"));
        for bad in ["", "1A", "A=B", "A B", "A-B", "é"] {
            assert!(!is_valid_env_name(bad), "{bad}");
            let plan = EnvPlan {
                set: vec![(bad.to_owned(), "v".to_owned())],
                ..EnvPlan::default()
            };
            assert!(matches!(plan.validate(), Err(Error::InvalidInput { .. })));
        }
    }
}

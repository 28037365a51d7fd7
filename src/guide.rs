//! The guide: how to use the crate, chapter by chapter, and how it is built.
//!
//! Documentation only: this module and its chapters hold no items. Each chapter is a file
//! under `docs/guide/` in the repository, included here, so every Rust example in it is
//! compiled by `cargo test --doc` (examples that need a live server are compiled, not run).
#![doc = include_str!("../docs/guide/00-index.md")]

pub mod connecting {
    #![doc = include_str!("../docs/guide/01-connecting.md")]
}

pub mod commands {
    #![doc = include_str!("../docs/guide/02-commands.md")]
}

pub mod files {
    #![doc = include_str!("../docs/guide/03-files.md")]
}

pub mod jobs {
    #![doc = include_str!("../docs/guide/04-jobs.md")]
}

pub mod escalation {
    #![doc = include_str!("../docs/guide/05-become.md")]
}

pub mod terminals {
    #![doc = include_str!("../docs/guide/06-terminals.md")]
}

pub mod forwards {
    #![doc = include_str!("../docs/guide/07-forwards.md")]
}

pub mod fleets {
    #![doc = include_str!("../docs/guide/08-fleets.md")]
}

pub mod guards {
    #![doc = include_str!("../docs/guide/09-guarded-commands.md")]
}

pub mod reliability {
    #![doc = include_str!("../docs/guide/10-reliability.md")]
}

pub mod testing {
    #![doc = include_str!("../docs/guide/11-testing.md")]
}

pub mod adapters {
    #![doc = include_str!("../docs/guide/12-adapters.md")]
}

pub mod architecture {
    #![doc = include_str!("../docs/guide/13-architecture.md")]
}

pub mod audit {
    #![doc = include_str!("../docs/guide/14-audit.md")]
}

pub mod checkpoints {
    #![doc = include_str!("../docs/guide/15-checkpoints.md")]
}

// The README's examples are compiled too (its `Usage` snippet), but not shown: on docs.rs the
// crate documentation above is the front page.
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct Readme;

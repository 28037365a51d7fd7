//! The remote program for one command: how the text is split ([`Program`]), quoted and
//! wrapped ([`wrapper`](mod@wrapper)), how the remote side reports its process group ([`marker`]) and is
//! stopped ([`supervisor`]), how an escalation tool is talked to ([`escalation`]), and the drive
//! loop that runs it on a pooled channel ([`drive`]), producing an [`Execution`].

// Each submodule imports only from the ones before it on this line (`.ci/check-layers.py`):
// Layers, bottom up: output < quote < program < pty < marker < supervisor < wrapper < escalation < resident < drive < feeder < process
mod drive;
mod escalation;
mod feeder;
mod marker;
mod output;
mod process;
mod program;
mod pty;
mod quote;
pub(crate) mod resident;
mod supervisor;
mod wrapper;

pub(crate) use drive::{Control, ExecRequest, Input, StdinItem, execute, launch};
pub(crate) use escalation::{Escalated, Exchange, hand_over};
pub(crate) use feeder::{Feeder, FeederFifo};
pub(crate) use marker::marker_prefix;
pub use output::{Execution, ExitStatus, OutputChunk, OutputSink};
pub use process::Process;
pub(crate) use process::{ProcessInput, STDIN_QUEUE};
pub(crate) use program::Program;
pub use pty::Pty;
pub(crate) use quote::quote;
pub(crate) use supervisor::Supervision;
#[doc(hidden)]
pub use wrapper::exec_request_for_benchmarks;
pub(crate) use wrapper::{
    direct_capable, direct_text, prestart_request, quote_line, script_request, wrapper,
};

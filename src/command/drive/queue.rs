//! The queue between a command's driver and its caller: events in order, output bounded by
//! [`OUTPUT_BUDGET`], and output held back while an attempt may still fall back.

use std::sync::Arc;

use tokio::sync::mpsc;

use crate::{
    command::output::{ExitStatus, OutputChunk},
    error::Result,
};

/// What the driver tells the caller's end.
pub(super) enum Event {
    Output(OutputChunk),
    Finished(Result<ExitStatus>),
}

/// Output bytes that may wait in a command's queue for the caller.
pub(crate) const OUTPUT_BUDGET: usize = 16 * 1024 * 1024;

/// What a chunk costs of [`OUTPUT_BUDGET`] (a chunk is one SSH packet, far below it).
pub(super) fn budget_cost(chunk: &OutputChunk) -> u32 {
    u32::try_from(chunk.bytes().len().min(OUTPUT_BUDGET)).unwrap_or(u32::MAX)
}

/// Closes the budget when the caller's side goes away, so that a driver waiting for room
/// carries on (and kills) instead of waiting forever.
pub(super) struct CloseBudgetOnDrop(pub(super) Arc<tokio::sync::Semaphore>);

impl Drop for CloseBudgetOnDrop {
    fn drop(&mut self) {
        self.0.close();
    }
}

/// Queues `chunk` for the caller once the budget has room; drops it when the caller is gone.
pub(super) async fn forward(
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    chunk: OutputChunk,
) {
    match budget.acquire_many(budget_cost(&chunk)).await {
        Ok(permit) => permit.forget(),
        Err(_) => return,
    }
    let _ = events.send(Event::Output(chunk));
}

/// Output of a direct request that waits for the marker (see `on_channel`), at most
/// [`HeldOutput::LIMIT`] bytes: past that it is released and the attempt can no longer fall
/// back.
#[derive(Default)]
pub(super) struct HeldOutput {
    chunks: Vec<OutputChunk>,
    bytes: usize,
}

impl HeldOutput {
    /// The marker parser's own search limit: a login shell's noise before the marker.
    const LIMIT: usize = 64 * 1024;
}

/// Forwards `chunk`, or holds it while a direct request waits for its marker (releasing
/// everything held, in order, once the limit is reached).
pub(super) async fn emit(
    held: &mut Option<HeldOutput>,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
    chunk: OutputChunk,
) {
    match held {
        Some(waiting) => {
            waiting.bytes += chunk.bytes().len();
            waiting.chunks.push(chunk);
            if waiting.bytes >= HeldOutput::LIMIT {
                release(held, events, budget).await;
            }
        }
        None => forward(events, budget, chunk).await,
    }
}

/// Forwards what a direct request held back and stops holding.
pub(super) async fn release(
    held: &mut Option<HeldOutput>,
    events: &mpsc::UnboundedSender<Event>,
    budget: &tokio::sync::Semaphore,
) {
    if let Some(held) = held.take() {
        for chunk in held.chunks {
            forward(events, budget, chunk).await;
        }
    }
}

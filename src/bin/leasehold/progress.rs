//! Progress of a long command on stderr: a bar on a terminal (indicatif), plain lines otherwise
//! (`swept 100/2317 tenants`, every 100 and at the end), so a log or a pipe gets readable text.

use std::io::IsTerminal;

use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};

/// How often a plain line is written.
const EVERY: usize = 100;

/// The progress of `total` items.
pub struct Progress {
    /// The bar, on a terminal.
    bar: Option<ProgressBar>,
    /// What is done to each (`swept`).
    verb: &'static str,
    /// What the items are (`tenants`).
    items: &'static str,
    /// How many there are.
    total: usize,
}

impl Progress {
    /// The progress of `total` `items`, each `verb`ed.
    pub fn new(verb: &'static str, items: &'static str, total: usize) -> Self {
        let bar = std::io::stderr().is_terminal().then(|| {
            let bar =
                ProgressBar::with_draw_target(Some(total as u64), ProgressDrawTarget::stderr());
            let style = ProgressStyle::with_template("{msg} [{bar:40}] {pos}/{len} ({eta} left)")
                .unwrap_or_else(|_| ProgressStyle::default_bar());
            bar.set_style(style);
            bar.set_message(format!("{verb} {items}"));
            bar
        });
        Self {
            bar,
            verb,
            items,
            total,
        }
    }

    /// `done` items are done.
    pub fn set(&self, done: usize) {
        match &self.bar {
            Some(bar) => bar.set_position(done as u64),
            None if done == self.total || done.is_multiple_of(EVERY) => {
                eprintln!("{} {done}/{} {}", self.verb, self.total, self.items);
            }
            None => {}
        }
    }

    /// All done: the bar goes.
    pub fn finish(&self) {
        if let Some(bar) = &self.bar {
            bar.finish_and_clear();
        }
    }
}

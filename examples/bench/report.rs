//! The summary table printed at the end (and pasted into BENCHMARKS.md).

#[derive(Debug, Clone)]
pub struct Row {
    pub scenario: String,
    pub ours: String,
    pub peer: String,
    pub ratio: String,
    pub target: String,
    /// `None`: no target for this row, or not measurable.
    pub met: Option<bool>,
}

#[derive(Debug, Default)]
pub struct Report {
    pub rows: Vec<Row>,
    pub notes: Vec<String>,
}

impl Report {
    pub fn row(
        &mut self,
        scenario: impl Into<String>,
        ours: impl Into<String>,
        peer: impl Into<String>,
        ratio: impl Into<String>,
        target: impl Into<String>,
        met: Option<bool>,
    ) {
        let row = Row {
            scenario: scenario.into(),
            ours: ours.into(),
            peer: peer.into(),
            ratio: ratio.into(),
            target: target.into(),
            met,
        };
        println!(
            "  => {} | ours {} | peer {} | {} | target {} {}",
            row.scenario,
            row.ours,
            row.peer,
            row.ratio,
            row.target,
            met_text(row.met)
        );
        self.rows.push(row);
    }

    pub fn note(&mut self, note: impl Into<String>) {
        let note = note.into();
        println!("  note: {note}");
        self.notes.push(note);
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        out.push_str("| scenario | ours | peer | ratio | target | met? |\n");
        out.push_str("|---|---|---|---|---|---|\n");
        for r in &self.rows {
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} |\n",
                esc(&r.scenario),
                esc(&r.ours),
                esc(&r.peer),
                esc(&r.ratio),
                esc(&r.target),
                met_text(r.met)
            ));
        }
        if !self.notes.is_empty() {
            out.push('\n');
            for n in &self.notes {
                out.push_str(&format!("- {n}\n"));
            }
        }
        out
    }
}

fn met_text(met: Option<bool>) -> &'static str {
    match met {
        Some(true) => "yes",
        Some(false) => "**no**",
        None => "–",
    }
}

fn esc(s: &str) -> String {
    s.replace('|', "\\|")
}

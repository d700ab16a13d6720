//! Aligned text tables; the header in bold only when stdout is a terminal.

use std::io::IsTerminal;

/// Rows of cells under a header, printed with every column as wide as its widest cell.
pub(crate) struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub(crate) fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| (*h).to_owned()).collect(),
            rows: Vec::new(),
        }
    }

    pub(crate) fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    pub(crate) fn print(&self) {
        let colour = std::io::stdout().is_terminal();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.chars().count()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if let Some(w) = widths.get_mut(i) {
                    *w = (*w).max(cell.chars().count());
                }
            }
        }
        let line = |cells: &[String]| {
            let last = cells.len().saturating_sub(1);
            cells
                .iter()
                .enumerate()
                .map(|(i, c)| {
                    if i == last {
                        c.clone()
                    } else {
                        format!("{c:<w$}", w = widths[i])
                    }
                })
                .collect::<Vec<_>>()
                .join("  ")
                .trim_end()
                .to_owned()
        };
        let head = line(&self.header);
        if colour {
            println!("\x1b[1m{head}\x1b[0m");
        } else {
            println!("{head}");
        }
        for row in &self.rows {
            let text = line(row);
            if colour && row.iter().any(|c| c == "FAILED") {
                println!("\x1b[31m{text}\x1b[0m");
            } else {
                println!("{text}");
            }
        }
    }
}

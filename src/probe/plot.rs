//! `--plot`: rate, loss and delay over time as a PNG.

use std::path::Path;

use anyhow::{Result, bail};

use super::output::Report;

pub fn draw(path: &Path, _report: &Report) -> Result<()> {
    bail!("--plot {}: not implemented yet", path.display())
}

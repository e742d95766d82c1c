//! The rules that divide a frame into stripes, by name. A leaf: the
//! error type names a rule, and parsing one (in `stripe`) returns that
//! error, so the rule itself depends on neither.

use std::fmt;

use serde::{Deserialize, Serialize};

/// How a frame is divided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum Rule {
    /// Horizontal bands.
    Lines,
    /// Quadrants (then bands).
    Square,
    /// Two-sample interleave (then bands).
    #[serde(rename = "2si")]
    TwoSampleInterleave,
}

impl Rule {
    /// Every rule.
    pub const ALL: [Rule; 3] = [Rule::Lines, Rule::Square, Rule::TwoSampleInterleave];

    /// The name on the command line and in configs: `lines`, `square`,
    /// `2si`.
    pub const fn name(self) -> &'static str {
        match self {
            Rule::Lines => "lines",
            Rule::Square => "square",
            Rule::TwoSampleInterleave => "2si",
        }
    }
}

impl fmt::Display for Rule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

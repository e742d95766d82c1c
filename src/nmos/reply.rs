//! An NMOS API answer before the HTTP front writes it, and the two
//! forms it takes: a JSON `200` and an error in the NMOS form. Its own
//! module, so the Node API and the Connection API share it without
//! importing each other.

use serde_json::{Value, json};

/// An answer before the HTTP front writes it (always JSON, but for the
/// empty body of `OPTIONS`). Its own type, so this module needs nothing
/// of the front's.
pub(crate) struct Reply {
    pub status: u16,
    pub body: Vec<u8>,
    pub content_type: &'static str,
    /// The methods a 405 (and `OPTIONS`) names in `Allow`.
    pub allow: Option<&'static str>,
}

/// A `200` with `value`.
pub(crate) fn ok(value: Value) -> Reply {
    Reply {
        status: 200,
        body: serde_json::to_vec_pretty(&value).unwrap_or_default(),
        content_type: "application/json",
        allow: None,
    }
}

/// An error in the NMOS form.
pub(crate) fn error(code: u16, message: &str) -> Reply {
    Reply {
        status: code,
        body: serde_json::to_vec(&json!({ "code": code, "error": message, "debug": null }))
            .unwrap_or_default(),
        content_type: "application/json",
        allow: None,
    }
}

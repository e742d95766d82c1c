//! The official AMWA NMOS JSON schemas (IS-04 v1.3, IS-05 v1.1), as
//! they ship in the `nmos` crate, and validation of an answer against
//! them with `$ref`s resolved across the files: what the tests of
//! serve's and `recv --nmos`'s NMOS APIs share.

use std::path::{Path, PathBuf};

use jsonschema::{Retrieve, Uri, Validator};
use serde_json::Value;

/// A base URI that never resolves; the retriever maps it to the files.
const BASE: &str = "https://schemas.nmos.invalid/";

/// The `schemas/is-04/v1.3` directory of the `nmos` crate, found through
/// `cargo metadata` (wherever the registry or a vendor directory put it).
pub fn schema_dir() -> PathBuf {
    // Offline, for this platform only: other platforms' crates are never
    // downloaded, so none is needed.
    let libc = if cfg!(target_env = "musl") {
        "musl"
    } else {
        "gnu"
    };
    let host = format!("{}-unknown-linux-{libc}", std::env::consts::ARCH);
    let out = std::process::Command::new(env!("CARGO"))
        .args(["metadata", "--format-version", "1", "--offline"])
        .args(["--filter-platform", &host, "--manifest-path"])
        .arg(Path::new(env!("CARGO_MANIFEST_DIR")).join("Cargo.toml"))
        .output()
        .expect("cargo metadata runs");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let meta: Value = serde_json::from_slice(&out.stdout).unwrap();
    let manifest = meta["packages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|p| p["name"] == "nmos")
        .expect("the nmos crate is a dev-dependency")["manifest_path"]
        .as_str()
        .unwrap()
        .to_string();
    Path::new(&manifest)
        .parent()
        .unwrap()
        .join("schemas/is-04/v1.3")
}

/// Serves the schema files to the validator, and nothing else.
struct Files(PathBuf);

impl Retrieve for Files {
    fn retrieve(
        &self,
        uri: &Uri<String>,
    ) -> Result<Value, Box<dyn std::error::Error + Send + Sync>> {
        let name = uri.path().as_str().rsplit('/').next().unwrap_or_default();
        let text = std::fs::read_to_string(self.0.join(name)).map_err(|e| format!("{uri}: {e}"))?;
        Ok(serde_json::from_str(&text)?)
    }
}

pub fn validator(dir: &Path, file: &str) -> Validator {
    let text = std::fs::read_to_string(dir.join(file)).unwrap();
    let schema: Value = serde_json::from_str(&text).unwrap();
    jsonschema::draft4::options()
        .with_base_uri(format!("{BASE}{file}"))
        .with_retriever(Files(dir.to_path_buf()))
        .build(&schema)
        .unwrap_or_else(|e| panic!("{file}: {e}"))
}

pub fn assert_valid(dir: &Path, file: &str, what: &str, instance: &Value) {
    let v = validator(dir, file);
    let errors: Vec<String> = v
        .iter_errors(instance)
        .map(|e| format!("  {}: {e}", e.instance_path()))
        .collect();
    assert!(
        errors.is_empty(),
        "{what} does not satisfy {file}:\n{}\n{instance:#}",
        errors.join("\n")
    );
}

/// The IS-05 v1.1 schemas beside the IS-04 ones.
pub fn is05_dir() -> PathBuf {
    schema_dir().join("../../is-05/v1.1")
}

/// An NMOS node under test, reached over HTTP.
pub trait NmosApi {
    /// One request (with the node's token, if any): the answer's status
    /// and body.
    fn request(&self, method: &str, path: &str, body: Option<&str>) -> (u16, String);

    /// A Connection API call whose answer must have `status` and satisfy
    /// the IS-05 `schema`: its body.
    fn call(
        &self,
        method: &str,
        path: &str,
        body: Option<Value>,
        status: u16,
        schema: &str,
    ) -> Value {
        let text = body.map(|b| b.to_string());
        let (got, body) = self.request(method, path, text.as_deref());
        let what = format!("{method} {path}");
        assert_eq!(got, status, "{what}: {body}");
        let value: Value =
            serde_json::from_str(&body).unwrap_or_else(|e| panic!("{what}: {e}: {body}"));
        assert_valid(&is05_dir(), schema, &what, &value);
        value
    }

    /// An activation scheduled an hour ahead at `staged` locks the
    /// resource (423) until cancelled; `schema` is its staged answer's.
    fn schedule_lock_and_cancel(&self, staged: &str, schema: &str) {
        let later = serde_json::json!({"activation":
            {"mode": "activate_scheduled_relative", "requested_time": "3600:0"}});
        let s = self.call("PATCH", staged, Some(later), 202, schema);
        assert_eq!(s["activation"]["mode"], "activate_scheduled_relative");
        let enable = serde_json::json!({"master_enable": true});
        self.call("PATCH", staged, Some(enable), 423, "error.json");
        let cancel = serde_json::json!({"activation": {"mode": null}});
        let s = self.call("PATCH", staged, Some(cancel), 200, schema);
        assert_eq!(s["activation"]["mode"], Value::Null);
    }
}

/// A Node API v1.3 read with `get` (a path to its `200` answer): the
/// base, self, every collection and each resource by id validated
/// against the IS-04 schemas. Self, and how many devices, sources,
/// flows, senders and receivers there are.
pub fn validate_node_api(get: impl Fn(&str) -> Value) -> (Value, Vec<usize>) {
    let dir = schema_dir();
    let v = "/x-nmos/node/v1.3";
    assert_valid(&dir, "nodeapi-base.json", "base", &get(&format!("{v}/")));
    let me = get(&format!("{v}/self"));
    assert_valid(&dir, "node.json", "self", &me);
    let mut counts = Vec::new();
    for (list, one) in [
        ("devices", "device.json"),
        ("sources", "source.json"),
        ("flows", "flow.json"),
        ("senders", "sender.json"),
        ("receivers", "receiver.json"),
    ] {
        let all = get(&format!("{v}/{list}/"));
        assert_valid(&dir, &format!("{list}.json"), list, &all);
        for r in all.as_array().unwrap() {
            let id = r["id"].as_str().unwrap();
            let by_id = get(&format!("{v}/{list}/{id}"));
            assert_eq!(&by_id, r);
            assert_valid(&dir, one, &format!("{list}/{id}"), &by_id);
        }
        counts.push(all.as_array().unwrap().len());
    }
    (me, counts)
}

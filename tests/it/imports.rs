//! The module graph stays a DAG: no import cycle between the files of
//! `src/` or of `crates/proto/src`, and no subcommand (`src/cmd/X`) uses
//! another one (`crate::cmd::Y`); what two subcommands share lives in a
//! module of its own (`src/engine`, `src/net`, ...), which in turn uses no
//! subcommand: only the crate root (`main.rs`) reaches into `cmd/`.
//!
//! The check reads the sources, not the compiler: comments and literals are
//! blanked, then every `use` tree and every `crate::`/`super::`/`self::`
//! (or child-module) path is resolved to the file that defines it. Imports
//! are followed through re-exports (`pub use`) and through a parent's private
//! `use` that a child reaches with `super::Name`, so an edge always points at
//! the file that holds the item. `mod x;` declares a child; it is not an
//! import.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::path::{Path, PathBuf};

/// A module path below the crate root (`["cmd", "recv", "writer"]`).
type ModPath = Vec<String>;

/// One source file of a crate: its module path and its text.
struct File {
    module: ModPath,
    text: String,
}

/// Why an edge exists: the path as written and its line.
#[derive(Clone, Debug)]
struct Evidence {
    path: String,
    line: usize,
}

/// The file graph of one crate: edges between module paths of files.
#[derive(Default)]
struct Graph {
    edges: BTreeMap<ModPath, BTreeMap<ModPath, Evidence>>,
}

/// Reads every `.rs` file below `src` (the crate root is `main.rs` or
/// `lib.rs`).
fn read_crate(src: &Path) -> Vec<File> {
    let mut out = Vec::new();
    let mut dirs = vec![src.to_path_buf()];
    while let Some(dir) = dirs.pop() {
        let mut entries: Vec<PathBuf> = std::fs::read_dir(&dir)
            .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
            .map(|e| e.expect("dir entry").path())
            .collect();
        entries.sort();
        for path in entries {
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|x| x == "rs") {
                let text = std::fs::read_to_string(&path).expect("read source");
                out.push(File {
                    module: module_of(src, &path),
                    text,
                });
            }
        }
    }
    out
}

/// `a/b.rs` and `a/b/mod.rs` are module `a::b`; the root file is `[]`.
fn module_of(src: &Path, file: &Path) -> ModPath {
    let rel = file.strip_prefix(src).expect("file below src");
    let mut parts: Vec<String> = rel
        .iter()
        .map(|c| c.to_string_lossy().into_owned())
        .collect();
    let last = parts.pop().expect("file name");
    let stem = last.trim_end_matches(".rs");
    let is_root = parts.is_empty() && (stem == "main" || stem == "lib");
    if stem != "mod" && !is_root {
        parts.push(stem.to_string());
    }
    parts
}

/// The text with comments, string and char literals blanked (newlines
/// kept, so line numbers still hold).
fn strip(src: &str) -> String {
    let s: Vec<char> = src.chars().collect();
    let mut out = String::with_capacity(src.len());
    let mut i = 0;
    let blank = |out: &mut String, c: char| out.push(if c == '\n' { '\n' } else { ' ' });
    while i < s.len() {
        let c = s[i];
        let next = s.get(i + 1).copied();
        if c == '/' && next == Some('/') {
            while i < s.len() && s[i] != '\n' {
                out.push(' ');
                i += 1;
            }
        } else if c == '/' && next == Some('*') {
            let mut depth = 0;
            while i < s.len() {
                if s[i] == '/' && s.get(i + 1) == Some(&'*') {
                    depth += 1;
                    out.push_str("  ");
                    i += 2;
                } else if s[i] == '*' && s.get(i + 1) == Some(&'/') {
                    depth -= 1;
                    out.push_str("  ");
                    i += 2;
                    if depth == 0 {
                        break;
                    }
                } else {
                    blank(&mut out, s[i]);
                    i += 1;
                }
            }
        } else if let Some((h, open)) = raw_string_start(&s, i) {
            for _ in i..=open {
                out.push(' ');
            }
            i = open + 1;
            while i < s.len() {
                if s[i] == '"' && (1..=h).all(|k| s.get(i + k) == Some(&'#')) {
                    for _ in 0..=h {
                        out.push(' ');
                    }
                    i += h + 1;
                    break;
                }
                blank(&mut out, s[i]);
                i += 1;
            }
        } else if c == '"' {
            out.push(' ');
            i += 1;
            while i < s.len() && s[i] != '"' {
                if s[i] == '\\' {
                    out.push(' ');
                    i += 1;
                }
                if i < s.len() {
                    blank(&mut out, s[i]);
                    i += 1;
                }
            }
            out.push(' ');
            i += 1;
        } else if c == '\'' {
            // A char literal ('x', '\n', '\u{..}') or a lifetime ('a).
            let end = if next == Some('\\') {
                (i + 2..s.len()).find(|&k| s[k] == '\'')
            } else if s.get(i + 2) == Some(&'\'') {
                Some(i + 2)
            } else {
                None
            };
            match end {
                Some(e) => {
                    for _ in i..=e {
                        out.push(' ');
                    }
                    i = e + 1;
                }
                None => {
                    out.push(c);
                    i += 1;
                }
            }
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// At `s[i]`, the start of a raw string (`r"`, `r#"`, `br#"`...): the
/// number of `#` and the index of the opening quote.
fn raw_string_start(s: &[char], i: usize) -> Option<(usize, usize)> {
    if i > 0 && (s[i - 1].is_alphanumeric() || s[i - 1] == '_') {
        return None;
    }
    let mut j = i;
    if matches!(s[j], 'b' | 'c') {
        j += 1;
    }
    if s.get(j) != Some(&'r') {
        return None;
    }
    j += 1;
    let hashes = s[j..].iter().take_while(|c| **c == '#').count();
    (s.get(j + hashes) == Some(&'"')).then_some((hashes, j + hashes))
}

#[derive(Clone, Debug, PartialEq)]
enum Tok {
    Ident(String),
    Path, // ::
    Punct(char),
}

/// Tokens with their line numbers.
fn lex(text: &str) -> Vec<(Tok, usize)> {
    let s: Vec<char> = text.chars().collect();
    let mut out = Vec::new();
    let mut line = 1;
    let mut i = 0;
    while i < s.len() {
        let c = s[i];
        if c == '\n' {
            line += 1;
            i += 1;
        } else if c.is_whitespace() {
            i += 1;
        } else if c.is_alphanumeric() || c == '_' || (c == '$' && s.get(i + 1) == Some(&'c')) {
            let start = if c == '$' { i + 1 } else { i };
            i = start;
            while i < s.len() && (s[i].is_alphanumeric() || s[i] == '_') {
                i += 1;
            }
            out.push((Tok::Ident(s[start..i].iter().collect()), line));
        } else if c == ':' && s.get(i + 1) == Some(&':') {
            out.push((Tok::Path, line));
            i += 2;
        } else {
            out.push((Tok::Punct(c), line));
            i += 1;
        }
    }
    out
}

/// A path found in one file: the module it was written in, its segments
/// and its line.
struct Found {
    scope: ModPath,
    segs: Vec<String>,
    line: usize,
    /// A `pub use`: a facade, no dependency of the file's own code. Who
    /// uses the name gets an edge to the defining file instead.
    reexport: bool,
}

/// What one file says: the paths it uses, the names its `use` statements
/// bring into each of its modules, and the child modules it declares.
#[derive(Default)]
struct Scan {
    paths: Vec<Found>,
    /// (module, name) -> the path the name stands for (unresolved).
    imports: BTreeMap<(ModPath, String), (ModPath, Vec<String>)>,
    /// Modules declared in this file (`mod x;` and `mod x { }`), by parent.
    children: BTreeSet<(ModPath, String)>,
}

fn ident(t: Option<&(Tok, usize)>) -> Option<&str> {
    match t {
        Some((Tok::Ident(s), _)) => Some(s),
        _ => None,
    }
}

fn scan(file: &File) -> Scan {
    let toks = lex(&strip(&file.text));
    let mut sc = Scan::default();
    // First pass: child module declarations, with their parents.
    walk_scopes(&toks, &file.module, |i, scope| {
        if ident(toks.get(i)) == Some("mod") {
            if let Some(name) = ident(toks.get(i + 1)) {
                sc.children.insert((scope.to_vec(), name.to_string()));
            }
        }
        i + 1
    });
    let children = sc.children.clone();
    let mut paths = Vec::new();
    let mut imports = BTreeMap::new();
    walk_scopes(&toks, &file.module, |i, scope| {
        let prev_is_path = i > 0 && toks[i - 1].0 == Tok::Path;
        match ident(toks.get(i)) {
            Some("use") if !prev_is_path => {
                let line = toks[i].1;
                let reexport = is_pub(&toks, i);
                let mut j = i + 1;
                let mut leaves = Vec::new();
                use_tree(&toks, &mut j, Vec::new(), &mut leaves);
                for (segs, alias) in leaves {
                    if let Some(name) = alias {
                        imports.insert((scope.to_vec(), name), (scope.to_vec(), segs.clone()));
                    }
                    paths.push(Found {
                        scope: scope.to_vec(),
                        segs,
                        line,
                        reexport,
                    });
                }
                j
            }
            Some(first) if !prev_is_path && toks.get(i + 1).map(|t| &t.0) == Some(&Tok::Path) => {
                let rooted = matches!(first, "crate" | "super" | "self")
                    || children.contains(&(scope.to_vec(), first.to_string()));
                let line = toks[i].1;
                let mut segs = vec![first.to_string()];
                let mut j = i + 1;
                while toks.get(j).map(|t| &t.0) == Some(&Tok::Path) {
                    match ident(toks.get(j + 1)) {
                        Some(s) => segs.push(s.to_string()),
                        None => break,
                    }
                    j += 2;
                }
                if rooted {
                    paths.push(Found {
                        scope: scope.to_vec(),
                        segs,
                        line,
                        reexport: false,
                    });
                }
                j
            }
            _ => i + 1,
        }
    });
    sc.paths = paths;
    sc.imports = imports;
    sc
}

/// Whether the `use` at `toks[i]` is `pub`, `pub(crate)`, `pub(super)`...
fn is_pub(toks: &[(Tok, usize)], i: usize) -> bool {
    let mut k = i;
    if k >= 1 && toks[k - 1].0 == Tok::Punct(')') {
        while k >= 1 && toks[k - 1].0 != Tok::Punct('(') {
            k -= 1;
        }
        k = k.saturating_sub(1);
    }
    k >= 1 && ident(toks.get(k - 1)) == Some("pub")
}

/// Walks the tokens, tracking which inline module (`mod x { .. }`) each one
/// is in; `step` gets an index and the current module and returns the next
/// index. Inline `#[cfg(test)]` modules are skipped: test code may reach
/// anything in its crate and is no part of the layering.
fn walk_scopes(
    toks: &[(Tok, usize)],
    root: &ModPath,
    mut step: impl FnMut(usize, &[String]) -> usize,
) {
    let mut scope = root.clone();
    // Per open brace: whether it opened an inline module.
    let mut braces: Vec<bool> = Vec::new();
    // Brace depth at which a `#[cfg(test)]` module opened.
    let mut test_depth: Option<usize> = None;
    let mut i = 0;
    while i < toks.len() {
        match &toks[i].0 {
            Tok::Punct('{') => {
                let inline = i >= 2 && ident(toks.get(i - 2)) == Some("mod");
                let name = if inline { ident(toks.get(i - 1)) } else { None };
                if let Some(name) = name {
                    scope.push(name.to_string());
                }
                if name.is_some() && test_depth.is_none() && cfg_test_before(toks, i - 2) {
                    test_depth = Some(braces.len());
                }
                braces.push(name.is_some());
                i += 1;
            }
            Tok::Punct('}') => {
                if braces.pop() == Some(true) {
                    scope.pop();
                }
                if test_depth == Some(braces.len()) {
                    test_depth = None;
                }
                i += 1;
            }
            _ if test_depth.is_some() => i += 1,
            _ => {
                let next = step(i, &scope);
                // Never skip a brace: the use-tree parser stops at `;`.
                i = next.max(i + 1);
            }
        }
    }
}

/// A use-tree leaf: one path and the name it binds (`None` for a glob
/// or `_`).
type Leaf = (Vec<String>, Option<String>);

fn tok(toks: &[(Tok, usize)], j: usize) -> Option<&Tok> {
    toks.get(j).map(|t| &t.0)
}

/// Whether `#[cfg(test)]` stands right before the item at `toks[k]`
/// (`pub` allowed between).
fn cfg_test_before(toks: &[(Tok, usize)], k: usize) -> bool {
    let k = if k >= 1 && ident(toks.get(k - 1)) == Some("pub") {
        k - 1
    } else {
        k
    };
    let want = [
        Tok::Punct('#'),
        Tok::Punct('['),
        Tok::Ident("cfg".into()),
        Tok::Punct('('),
        Tok::Ident("test".into()),
        Tok::Punct(')'),
        Tok::Punct(']'),
    ];
    k >= want.len() && toks[k - want.len()..k].iter().map(|t| &t.0).eq(want.iter())
}

/// Parses a use tree at `toks[*j]`, appending each leaf. Stops after the
/// tree.
fn use_tree(toks: &[(Tok, usize)], j: &mut usize, prefix: Vec<String>, out: &mut Vec<Leaf>) {
    let mut segs = prefix;
    loop {
        match tok(toks, *j) {
            Some(Tok::Path) => {
                // A leading `::` names an extern crate.
                segs.push("::".into());
                *j += 1;
            }
            Some(Tok::Ident(s)) => {
                segs.push(s.clone());
                *j += 1;
                if tok(toks, *j) == Some(&Tok::Path) {
                    *j += 1;
                    continue;
                }
                let mut name = segs.last().cloned();
                if name.as_deref() == Some("self") {
                    segs.pop();
                    name = segs.last().cloned();
                }
                if ident(toks.get(*j)) == Some("as") {
                    name = ident(toks.get(*j + 1)).map(str::to_string);
                    *j += 2;
                }
                out.push((segs, name.filter(|n| n != "_")));
                return;
            }
            Some(Tok::Punct('*')) => {
                *j += 1;
                out.push((segs, None));
                return;
            }
            Some(Tok::Punct('{')) => {
                *j += 1;
                loop {
                    match tok(toks, *j) {
                        Some(Tok::Punct('}')) => {
                            *j += 1;
                            return;
                        }
                        Some(Tok::Punct(',')) => *j += 1,
                        None | Some(Tok::Punct(';')) => return,
                        _ => use_tree(toks, j, segs.clone(), out),
                    }
                }
            }
            _ => return,
        }
    }
}

/// The crate: files by module path, what each file says.
struct Crate {
    files: BTreeMap<ModPath, Scan>,
}

impl Crate {
    fn new(files: &[File]) -> Self {
        Crate {
            files: files.iter().map(|f| (f.module.clone(), scan(f))).collect(),
        }
    }

    /// The file holding module `m` (the longest prefix that is a file).
    fn file_of(&self, m: &[String]) -> Option<ModPath> {
        (0..=m.len())
            .rev()
            .map(|n| m[..n].to_vec())
            .find(|p| self.files.contains_key(p))
    }

    /// The module a path written in `scope` names, made absolute; `None`
    /// for a path into another crate.
    fn absolute(&self, scope: &[String], segs: &[String]) -> Option<ModPath> {
        self.absolute_at(scope, segs, 0)
    }

    fn absolute_at(&self, scope: &[String], segs: &[String], depth: usize) -> Option<ModPath> {
        let first = segs.first()?;
        if depth > 16 {
            return None;
        }
        let mut abs: ModPath;
        let rest: &[String];
        match first.as_str() {
            "crate" => {
                abs = Vec::new();
                rest = &segs[1..];
            }
            "self" => {
                abs = scope.to_vec();
                rest = &segs[1..];
            }
            "super" => {
                abs = scope.to_vec();
                let n = segs.iter().take_while(|s| *s == "super").count();
                for _ in 0..n {
                    abs.pop()?;
                }
                rest = &segs[n..];
            }
            _ => {
                let file = self.file_of(scope)?;
                let declared = self.files[&file]
                    .children
                    .contains(&(scope.to_vec(), first.clone()));
                if !declared {
                    // A name a `use` in this module brought in.
                    let (from, target) = self.files[&file]
                        .imports
                        .get(&(scope.to_vec(), first.clone()))?;
                    let mut t = self.absolute_at(from, target, depth + 1)?;
                    t.extend(segs[1..].iter().cloned());
                    return Some(t);
                }
                abs = scope.to_vec();
                rest = segs;
            }
        }
        abs.extend(rest.iter().filter(|s| *s != "self").cloned());
        Some(abs)
    }

    /// The file that defines what absolute path `abs` names, following
    /// imports and re-exports (`depth` bounds a re-export loop).
    fn defining_file(&self, abs: &[String], depth: usize) -> Option<ModPath> {
        let file = self.file_of(abs)?;
        if depth > 16 {
            return Some(file);
        }
        // The deepest module of `abs` inside this file (inline modules
        // included), then the name looked up in it.
        for n in (file.len()..abs.len()).rev() {
            let (module, name) = (&abs[..n], &abs[n]);
            let scan = &self.files[&file];
            if scan.children.contains(&(module.to_vec(), name.clone())) {
                // A module declared here: the file (or inline module) is
                // the longest prefix already.
                continue;
            }
            if let Some((from, target)) = scan.imports.get(&(module.to_vec(), name.clone())) {
                let mut t = self.absolute(from, target)?;
                t.extend(abs[n + 1..].iter().cloned());
                if t.as_slice() == abs {
                    break;
                }
                return self.defining_file(&t, depth + 1).or(Some(file));
            }
        }
        Some(file)
    }

    fn graph(&self) -> Graph {
        let mut g = Graph::default();
        for (from, scan) in &self.files {
            for f in scan.paths.iter().filter(|f| !f.reexport) {
                let Some(abs) = self.absolute(&f.scope, &f.segs) else {
                    continue;
                };
                let Some(to) = self.defining_file(&abs, 0) else {
                    continue;
                };
                if &to != from {
                    g.edges
                        .entry(from.clone())
                        .or_default()
                        .entry(to)
                        .or_insert_with(|| Evidence {
                            path: f.segs.join("::"),
                            line: f.line,
                        });
                }
            }
        }
        g
    }
}

impl Graph {
    fn reach(&self, from: &ModPath) -> BTreeSet<ModPath> {
        let mut seen = BTreeSet::new();
        let mut queue: VecDeque<&ModPath> = VecDeque::from([from]);
        while let Some(m) = queue.pop_front() {
            for to in self.edges.get(m).into_iter().flat_map(|e| e.keys()) {
                if seen.insert(to.clone()) {
                    queue.push_back(to);
                }
            }
        }
        seen
    }

    /// Each strongly connected group of files (all files that reach each
    /// other), with one shortest cycle through its first file.
    fn cycles(&self) -> Vec<(BTreeSet<ModPath>, Vec<ModPath>)> {
        let mut done: BTreeSet<ModPath> = BTreeSet::new();
        let mut out = Vec::new();
        for m in self.edges.keys() {
            if done.contains(m) || !self.reach(m).contains(m) {
                continue;
            }
            let group: BTreeSet<ModPath> = self
                .reach(m)
                .into_iter()
                .filter(|o| self.reach(o).contains(m))
                .collect();
            done.extend(group.iter().cloned());
            out.push((group, self.shortest_cycle(m)));
        }
        out
    }

    fn shortest_cycle(&self, start: &ModPath) -> Vec<ModPath> {
        let mut prev: BTreeMap<ModPath, ModPath> = BTreeMap::new();
        let mut queue = VecDeque::from([start.clone()]);
        while let Some(m) = queue.pop_front() {
            for to in self.edges.get(&m).into_iter().flat_map(|e| e.keys()) {
                if to == start {
                    let mut path = vec![m.clone()];
                    while let Some(p) = prev.get(path.last().expect("path")) {
                        path.push(p.clone());
                    }
                    path.reverse();
                    return path;
                }
                if !prev.contains_key(to) {
                    prev.insert(to.clone(), m.clone());
                    queue.push_back(to.clone());
                }
            }
        }
        vec![start.clone()]
    }

    /// The cycle written out with the path that makes each step.
    fn describe(&self, cycle: &[ModPath], name: &dyn Fn(&ModPath) -> String) -> String {
        let mut s = String::new();
        for (k, m) in cycle.iter().enumerate() {
            let to = &cycle[(k + 1) % cycle.len()];
            let ev = &self.edges[m][to];
            s.push_str(&format!(
                "\n    {} -> {}  ({} at line {})",
                name(m),
                name(to),
                ev.path,
                ev.line
            ));
        }
        s
    }

    /// Edges into a subcommand's files from another subcommand's, or
    /// from a module outside `cmd/` other than the crate root: a shared
    /// module that used a subcommand would carry one subcommand's driver
    /// into every other that uses it.
    fn cross_subcommand(&self) -> Vec<(ModPath, ModPath, Evidence)> {
        let sub = |m: &ModPath| (m.len() >= 2 && m[0] == "cmd").then(|| m[1].clone());
        let mut out = Vec::new();
        for (from, tos) in &self.edges {
            if from.is_empty() || from.as_slice() == ["cmd"] {
                continue;
            }
            let a = sub(from);
            for (to, ev) in tos {
                if sub(to).is_some_and(|b| a.as_ref() != Some(&b)) {
                    out.push((from.clone(), to.clone(), ev.clone()));
                }
            }
        }
        out
    }
}

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// The file name of a module in a crate, for messages.
fn file_name(src: &Path, files: &[File], m: &ModPath) -> String {
    let _ = files;
    let base = src.join(m.join("/"));
    let mod_rs = base.join("mod.rs");
    let path = if m.is_empty() {
        ["main.rs", "lib.rs"]
            .iter()
            .map(|f| src.join(f))
            .find(|p| p.exists())
            .unwrap_or(base)
    } else if mod_rs.exists() {
        mod_rs
    } else {
        base.with_extension("rs")
    };
    path.strip_prefix(repo())
        .unwrap_or(&path)
        .display()
        .to_string()
}

fn check_crate(src: &Path) -> Vec<String> {
    let files = read_crate(src);
    let g = Crate::new(&files).graph();
    let name = |m: &ModPath| file_name(src, &files, m);
    let mut problems: Vec<String> = g
        .cycles()
        .iter()
        .map(|(group, cycle)| {
            let files: Vec<String> = group.iter().map(&name).collect();
            format!(
                "import cycle among {}; one loop:{}",
                files.join(", "),
                g.describe(cycle, &name)
            )
        })
        .collect();
    for (from, to, ev) in g.cross_subcommand() {
        problems.push(format!(
            "a subcommand's module used from outside it: {} uses {} ({} at line {}); move the shared part to a module outside src/cmd",
            name(&from),
            name(&to),
            ev.path,
            ev.line
        ));
    }
    problems
}

#[test]
fn no_import_cycle_and_no_subcommand_imports_another() {
    let mut problems = check_crate(&repo().join("src"));
    problems.extend(check_crate(&repo().join("crates/proto/src")));
    assert!(
        problems.is_empty(),
        "{} problem(s):\n{}",
        problems.len(),
        problems.join("\n")
    );
}

#[cfg(test)]
mod synthetic {
    use super::*;

    fn files(list: &[(&str, &str)]) -> Vec<File> {
        list.iter()
            .map(|(m, text)| File {
                module: if m.is_empty() {
                    Vec::new()
                } else {
                    m.split("::").map(str::to_string).collect()
                },
                text: text.to_string(),
            })
            .collect()
    }

    fn m(s: &str) -> ModPath {
        s.split("::").map(str::to_string).collect()
    }

    #[test]
    fn finds_a_three_file_cycle_through_super_crate_and_child_paths() {
        let fs = files(&[
            ("", "mod a;\nmod b;"),
            (
                "a",
                "//! uses crate::b in a comment only\nmod c;\npub struct A;\nfn f() { c::C::new(); }",
            ),
            ("a::c", "pub struct C;\nfn g() -> crate::b::B { todo!() }"),
            ("b", "use super::a::A;\npub struct B;"),
        ]);
        let g = Crate::new(&fs).graph();
        let cycles = g.cycles();
        assert_eq!(cycles.len(), 1, "{cycles:?}");
        let (group, cycle) = &cycles[0];
        assert_eq!(group, &BTreeSet::from([m("a"), m("a::c"), m("b")]));
        assert_eq!(cycle.len(), 3, "{cycle:?}");
    }

    #[test]
    fn a_dag_and_mod_declarations_are_no_cycle() {
        let fs = files(&[
            (
                "",
                "mod a;\nmod b;\nuse b::B;\nconst S: &str = \"crate::a::A\";",
            ),
            (
                "a",
                "pub struct A; mod inner { use super::*; fn t() { let s = r#\"crate::b\"#; } }\n#[cfg(test)]\nmod tests { use crate::b::B; }",
            ),
            (
                "b",
                "use crate::a::{self, A as Alias};\npub struct B;\nfn c() -> char { '{' }",
            ),
        ]);
        let g = Crate::new(&fs).graph();
        assert!(g.cycles().is_empty(), "{:?}", g.edges);
        assert!(g.edges[&m("b")].contains_key(&m("a")));
    }

    #[test]
    fn follows_re_exports_to_the_defining_file() {
        // link takes Seed through the parent's re-export; the parent's
        // re-export of link is no cycle, a real use of the parent is.
        let fs = files(&[
            ("", "mod tree;"),
            (
                "tree",
                "mod link;\nmod secure;\npub use link::Link;\npub use secure::Seed;\npub const T: u32 = 1;",
            ),
            ("tree::link", "use super::Seed;\npub struct Link;"),
            ("tree::secure", "pub struct Seed;"),
        ]);
        let g = Crate::new(&fs).graph();
        assert!(g.cycles().is_empty(), "{:?}", g.edges);
        assert!(g.edges[&m("tree::link")].contains_key(&m("tree::secure")));

        // The parent's own code using link, and secure using the parent's
        // constant, close a loop tree -> link -> secure -> tree.
        let mut fs = fs;
        fs[1].text.push_str("\nfn f(_: link::Link) {}");
        fs[3].text.push_str("\nfn t() -> u32 { super::T }");
        let g = Crate::new(&fs).graph();
        assert_eq!(g.cycles().len(), 1, "{:?}", g.edges);
    }

    #[test]
    fn flags_one_subcommand_using_another() {
        let fs = files(&[
            ("", "mod cmd;\nmod signal;"),
            ("cmd", "pub mod probe;\npub mod impair;"),
            (
                "cmd::probe",
                "pub fn bind_udp() {}\nfn s() { crate::signal::stop(); }",
            ),
            ("cmd::impair", "use crate::cmd::probe::bind_udp;"),
            ("signal", "pub fn stop() {}"),
        ]);
        let g = Crate::new(&fs).graph();
        let cross = g.cross_subcommand();
        assert_eq!(cross.len(), 1);
        assert_eq!(
            (cross[0].0.clone(), cross[0].1.clone()),
            (m("cmd::impair"), m("cmd::probe"))
        );
    }

    #[test]
    fn flags_a_shared_module_using_a_subcommand_but_not_the_root() {
        // The root dispatches to every subcommand; a shared engine that
        // took a subcommand's type would make its users depend on it.
        let fs = files(&[
            (
                "",
                "mod cmd;
mod engine;
fn main() { cmd::send::main(); }",
            ),
            (
                "cmd",
                "pub mod send;
pub mod demo;",
            ),
            (
                "cmd::send",
                "use crate::engine::send::run;
pub fn main() { run(); }
pub struct Args;",
            ),
            (
                "cmd::demo",
                "use crate::engine::send::run;
fn d() { run(); }",
            ),
            ("engine", "pub mod send;"),
            (
                "engine::send",
                "use crate::cmd::send::Args;
pub fn run() {}",
            ),
        ]);
        let g = Crate::new(&fs).graph();
        let cross = g.cross_subcommand();
        assert_eq!(cross.len(), 1, "{cross:?}");
        assert_eq!(
            (cross[0].0.clone(), cross[0].1.clone()),
            (m("engine::send"), m("cmd::send"))
        );
    }
}

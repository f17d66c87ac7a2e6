//! The error table in `core/src/error.rs` against every copy of it in the repository.
//!
//! The WIT enum, the wasm guest's mapping onto it, the Python exception classes, the
//! JavaScript bindings and the wasmtime-py wrapper each spell the codes out (they are other
//! languages, or generated code, and cannot import the table), so this test reads those
//! files and compares codes, names and order with [`ERROR_KINDS`] and
//! [`BOUNDARY_ERROR_KINDS`]. A kind added in one place only fails here, with the lines to
//! add and where.

use std::fs;
use std::path::{Path, PathBuf};

use zrecord_core::error::{ErrorKind, BOUNDARY_ERROR_KINDS, ERROR_KINDS};

const WIT: &str = "wit/zrecord.wit";
const GUEST_API: &str = "host-wasm/guest/src/api.rs";
const JS: &str = "bindings/js/src/index.js";
const WASM_PY: &str = "host-wasm/python/zr_wasm.py";
const ERRORS_PY: &str = "bindings/python/python/zrecord/errors.py";
const INIT_PY: &str = "bindings/python/python/zrecord/__init__.py";

/// Python's own exceptions that a table entry may name instead of a `zrecord.errors` class.
const PYTHON_BUILTINS: &[&str] = &["ValueError"];

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("core/ sits in the repository").to_path_buf()
}

fn read(rel: &str) -> String {
    let path = repo().join(rel);
    fs::read_to_string(&path).unwrap_or_else(|e| {
        panic!("{}: {e} (this test checks the repository's copies of the error table)", path.display())
    })
}

/// The text between the first `start` and the first `end` after it.
fn block<'a>(text: &'a str, file: &str, start: &str, end: &str) -> &'a str {
    let from = text.find(start).unwrap_or_else(|| panic!("{file}: no `{start}` (the error table is expected there)"));
    let rest = &text[from + start.len()..];
    let to = rest.find(end).unwrap_or_else(|| panic!("{file}: no `{end}` after `{start}`"));
    &rest[..to]
}

fn kebab_to_camel(name: &str) -> String {
    name.split('-')
        .map(|w| {
            let mut c = w.chars();
            c.next().map(|f| f.to_ascii_uppercase().to_string() + c.as_str()).unwrap_or_default()
        })
        .collect()
}

/// Collects what disagrees, so one run names every place to edit.
#[derive(Default)]
struct Problems(Vec<String>);

impl Problems {
    /// Compares an ordered list of `(code, name)` read from `file` with the expected one; on
    /// a difference, says which entries to add or remove, each as the line `line` spells it.
    fn compare_list(
        &mut self,
        file: &str,
        what: &str,
        found: &[(i32, String)],
        expected: &[(i32, String)],
        line: impl Fn(&(i32, String)) -> String,
    ) {
        if found == expected {
            return;
        }
        let mut msg = format!("{file}: {what} differs from ERROR_KINDS in core/src/error.rs.");
        for e in expected.iter().filter(|e| !found.contains(e)) {
            msg += &format!("\n    add: {}", line(e));
        }
        for f in found.iter().filter(|f| !expected.contains(f)) {
            msg += &format!("\n    remove or fix: {}", line(f));
        }
        msg += &format!("\n    expected, in this order: {expected:?}\n    found: {found:?}");
        self.0.push(msg);
    }

    fn check(&mut self, ok: bool, msg: impl FnOnce() -> String) {
        if !ok {
            self.0.push(msg());
        }
    }
}

impl Drop for Problems {
    fn drop(&mut self) {
        if !self.0.is_empty() && !std::thread::panicking() {
            panic!(
                "the error table (core/src/error.rs, ERROR_KINDS) and its copies disagree:\n\n{}\n",
                self.0.join("\n\n")
            );
        }
    }
}

fn core_kinds() -> Vec<(i32, String)> {
    ERROR_KINDS.iter().map(|k| (k.code, k.name.to_string())).collect()
}

/// `'name': -1,` / `name: -1,` / `"name": -1,` lines of a JavaScript or Python mapping.
fn name_code_pairs(body: &str, file: &str) -> Vec<(i32, String)> {
    body.lines()
        .map(|l| l.split('#').next().unwrap().split("//").next().unwrap().trim())
        .filter(|l| !l.is_empty())
        .map(|l| {
            let (k, v) = l.split_once(':').unwrap_or_else(|| panic!("{file}: cannot read `{l}` as `name: code`"));
            let k = k.trim().trim_matches(|c| c == '\'' || c == '"').to_string();
            let v: i32 = v.trim().trim_end_matches(',').trim().parse().unwrap_or_else(|e| panic!("{file}: `{l}`: {e}"));
            (v, k)
        })
        .collect()
}

#[test]
fn wit_enum_lists_every_core_kind_in_code_order() {
    let text = read(WIT);
    let body = block(&text, WIT, "enum error-code {", "}");
    // Each case is preceded by a `/// -N: meaning` comment; both must agree with the table.
    let mut found = Vec::new();
    let mut commented: Option<i32> = None;
    let mut p = Problems::default();
    for line in body.lines().map(str::trim).filter(|l| !l.is_empty()) {
        if let Some(doc) = line.strip_prefix("///") {
            let code = doc.trim().split(':').next().unwrap_or("");
            commented = code.parse().ok();
        } else {
            let name = line.trim_end_matches(',').to_string();
            let at = found.len() as i32;
            p.check(commented == Some(-at - 1), || {
                format!("{WIT}: case `{name}` (number {}) needs the comment `/// {}: ...` above it", at + 1, -at - 1)
            });
            found.push((-at - 1, name));
            commented = None;
        }
    }
    let expected = core_kinds();
    p.compare_list(WIT, "`enum error-code` (case i is code -(i + 1))", &found, &expected, |(code, name)| {
        let m = ErrorKind::from_code(*code).map_or("...", |k| k.message);
        format!("`/// {code}: {m}` then `{name},` as case number {}", -code)
    });
    for k in BOUNDARY_ERROR_KINDS {
        p.check(!found.iter().any(|(_, n)| n == k.name), || {
            format!("{WIT}: `{}` is a binding's own kind (BOUNDARY_ERROR_KINDS), not a WIT case", k.name)
        });
    }
}

#[test]
fn guest_maps_every_code_to_its_wit_case() {
    let text = read(GUEST_API);
    let body = block(&text, GUEST_API, "let code = match e.code() {", "};");
    let mut found = Vec::new();
    for line in body.lines().map(str::trim).filter(|l| l.starts_with('-')) {
        let (code, case) = line.split_once("=>").unwrap_or_else(|| panic!("{GUEST_API}: cannot read `{line}`"));
        let code: i32 = code.trim().parse().unwrap_or_else(|e| panic!("{GUEST_API}: `{line}`: {e}"));
        let case = case.trim().trim_end_matches(',').trim_start_matches("ErrorCode::").to_string();
        found.push((code, case));
    }
    let expected: Vec<(i32, String)> = ERROR_KINDS.iter().map(|k| (k.code, kebab_to_camel(k.name))).collect();
    let mut p = Problems::default();
    p.compare_list(
        GUEST_API,
        "`to_wit`'s match on the code (every code spelled out)",
        &found,
        &expected,
        |(code, case)| format!("`{code} => ErrorCode::{case},`"),
    );
}

#[test]
fn javascript_table_matches() {
    let text = read(JS);
    let body = block(&text, JS, "export const ERROR_CODES = Object.freeze({", "});");
    let found = name_code_pairs(body, JS);
    let mut p = Problems::default();
    p.compare_list(JS, "`ERROR_CODES`", &found, &core_kinds(), |(code, name)| {
        if name.contains('-') {
            format!("`'{name}': {code},`")
        } else {
            format!("`{name}: {code},`")
        }
    });
}

#[test]
fn wasmtime_py_table_matches() {
    let text = read(WASM_PY);
    let body = block(&text, WASM_PY, "ERROR_CODES = {", "}");
    let found = name_code_pairs(body, WASM_PY);
    let mut p = Problems::default();
    p.compare_list(WASM_PY, "`ERROR_CODES`", &found, &core_kinds(), |(code, name)| format!("`\"{name}\": {code},`"));
}

/// `-1: "message",` lines of a Python dict.
fn code_message_pairs(body: &str) -> Vec<(i32, String)> {
    body.lines()
        .filter_map(|l| {
            let (k, v) = l.split_once(':')?;
            let v = v.trim().trim_end_matches(',').trim();
            Some((k.trim().parse().ok()?, v.strip_prefix('"')?.strip_suffix('"')?.to_string()))
        })
        .collect()
}

/// `class Name(...)` blocks of a Python module with the `CODE = N` each sets, if any.
fn python_classes(text: &str) -> Vec<(String, Option<i32>)> {
    let mut out: Vec<(String, Option<i32>)> = Vec::new();
    let mut in_class = false;
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("class ") {
            out.push((rest.split(['(', ':']).next().unwrap().trim().to_string(), None));
            in_class = true;
        } else if !line.is_empty() && !line.starts_with(' ') {
            // Top-level code ends the class body.
            in_class = false;
        } else if let (true, Some(v)) = (in_class, line.strip_prefix("    CODE = ")) {
            out.last_mut().unwrap().1 = v.trim().parse().ok();
        }
    }
    out
}

#[test]
fn python_exceptions_match() {
    let errors = read(ERRORS_PY);
    let init = read(INIT_PY);
    let classes = python_classes(&errors);
    let messages = code_message_pairs(block(&errors, ERRORS_PY, "_MESSAGES = {", "}"));
    let all = block(&errors, ERRORS_PY, "__all__ = [", "]");
    let by_code = block(&errors, ERRORS_PY, "_BY_CODE = {", "}");
    let init_all = block(&init, INIT_PY, "__all__ = [", "]");
    let doc = block(&errors, ERRORS_PY, "code   class", "\"\"\"");
    let doc_rows: Vec<(i32, String)> = doc
        .lines()
        .filter_map(|l| {
            let mut w = l.split_whitespace();
            Some((w.next()?.parse().ok()?, w.next()?.to_string()))
        })
        .collect();

    let mut p = Problems::default();
    for k in ERROR_KINDS.iter().chain(BOUNDARY_ERROR_KINDS) {
        let quoted = format!("\"{}\"", k.python);
        if PYTHON_BUILTINS.contains(&k.python) {
            p.check(!classes.iter().any(|(n, _)| n == k.python), || {
                format!("{ERRORS_PY}: code {} is Python's built-in {}; do not shadow it", k.code, k.python)
            });
        } else {
            let class = classes.iter().find(|(n, _)| n == k.python);
            p.check(class.is_some_and(|(_, c)| *c == Some(k.code)), || {
                format!(
                    "{ERRORS_PY}: add (or fix the CODE of) the class\n\nclass {}(_Coded):\n    \"\"\"Code {}: {}.\"\"\"\n\n    CODE = {}\n",
                    k.python, k.code, k.message, k.code
                )
            });
            p.check(all.contains(&quoted), || format!("{ERRORS_PY}: add `{quoted},` to `__all__`"));
            p.check(by_code.lines().any(|l| l.trim() == format!("{},", k.python)), || {
                format!("{ERRORS_PY}: add `{},` to the classes of `_BY_CODE`", k.python)
            });
            p.check(init_all.contains(&quoted), || {
                format!("{INIT_PY}: import {} from .errors and add `{quoted},` to `__all__`", k.python)
            });
        }
        p.check(messages.contains(&(k.code, k.message.to_string())), || {
            format!("{ERRORS_PY}: `_MESSAGES` needs `{}: \"{}\",`", k.code, k.message)
        });
        p.check(doc_rows.contains(&(k.code, k.python.to_string())), || {
            format!(
                "{ERRORS_PY}: the module docstring's table needs the row `{:<6} {:<26} {}`",
                k.code, k.python, k.message
            )
        });
    }
    // Nothing in Python that the table does not know: each public class's CODE and each
    // message key is a table code (`_Coded`'s placeholder CODE = 0 is not a kind).
    for (name, code) in classes.iter().filter(|(n, _)| !n.starts_with('_')).filter_map(|(n, c)| Some((n, (*c)?))) {
        p.check(ErrorKind::from_code(code).is_some_and(|k| k.python == name), || {
            format!(
                "{ERRORS_PY}: class {name} has CODE = {code}, which ERROR_KINDS / BOUNDARY_ERROR_KINDS in \
                 core/src/error.rs does not give to {name}: add the kind there first"
            )
        });
    }
    for (code, _) in &messages {
        p.check(ErrorKind::from_code(*code).is_some(), || {
            format!("{ERRORS_PY}: `_MESSAGES` has code {code}, which core/src/error.rs does not define")
        });
    }
    for (code, class) in &doc_rows {
        let known = ErrorKind::from_code(*code).is_some_and(|k| k.python == class)
            || classes.iter().any(|(n, c)| n == class && c.is_none());
        p.check(known, || format!("{ERRORS_PY}: docstring row `{code} {class}` is not in core/src/error.rs"));
    }
}

#[test]
fn python_class_parser_reads_codes() {
    // The checks above are only as good as this reader: it must see a class's CODE and not
    // give a class the CODE of a later one.
    let text = "class A(_Coded):\n    \"\"\"Doc.\"\"\"\n\n    CODE = -3\n\n\nclass B(A):\n    pass\n\n\nX = 1\n";
    assert_eq!(python_classes(text), vec![("A".to_string(), Some(-3)), ("B".to_string(), None)]);
}

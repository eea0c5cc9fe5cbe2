//! Tidy: the rules of STYLE.md that a compiler does not check, run as part of `cargo test`.
//!
//! Over every `.rs` file under `crates/`:
//! - no debugging macro (`dbg!`) anywhere, and no `todo!()` / `unimplemented!()` outside
//!   test code (files under `tests/` or `benches/`, or after a `#[cfg(test)]` line);
//! - every `unsafe` block and `unsafe impl` carries a `// SAFETY:` comment on its line or in
//!   the comment (or attribute) lines directly above it; every `unsafe fn` documents `# Safety`;
//! - every crate root denies `unsafe_code` (leaf modules allow it by name);
//! - no fix-me marker, and no line longer than 100 columns (rustfmt does not wrap comments);
//! - test code makes its files only through a helper that removes them (a `tempfile`
//!   directory, or `tests/common`'s `TempDir` and `compile`): no call of
//!   `std::env::temp_dir` and no string naming a path under `/tmp` in test code outside
//!   `tests/common/`, except on a line marked `tidy: reads` (it only looks there) or
//!   `tidy: kept` (a file kept on purpose, and said why), on it or in the comment lines
//!   directly above it, and in the files of
//!   [`SCRATCH_NOT_YET`]. So a test run leaves nothing in the temporary directory;
//!   `.ci/run` checks that it did.
//!
//! Each rule is itself tested on a small bad sample, so the tidy test can fail.
//!
//! The documents' rules (docs/benchmarks.md's length, no stories of how the work went, no
//! link to a file the repository lacks) are in [`docs`].

#[path = "tidy/docs.rs"]
mod docs;

use std::path::{Path, PathBuf};

/// The needles are assembled from pieces so that this file does not trip its own rules.
fn needle(parts: &[&str]) -> String {
    parts.concat()
}

#[derive(Debug, PartialEq)]
struct Problem {
    line: usize,
    what: String,
}

/// Is this line inside test code? `test_from` is the first line of a `#[cfg(test)]` module.
fn in_test(line: usize, test_from: Option<usize>) -> bool {
    test_from.is_some_and(|start| line >= start)
}

/// Files whose tests still make their own files in the temporary directory (and remove
/// them when they pass): a module another change is rewriting, to move to the helpers
/// after it lands. Only shrinks: a listed file with no such line any more fails.
const SCRATCH_NOT_YET: [&str; 1] = ["crates/cli/src/bench/compare/"];

/// Checks one file's text. `is_test_file` is true for files under `tests/` or `benches/`,
/// `is_helper` for the shared test helpers (`tests/common/`) and the files of
/// [`SCRATCH_NOT_YET`].
fn check_text(
    text: &str,
    is_test_file: bool,
    is_crate_root: bool,
    is_helper: bool,
) -> Vec<Problem> {
    let mut problems = Vec::new();
    let lines: Vec<&str> = text.lines().collect();
    let test_from = if is_test_file {
        Some(0)
    } else {
        lines.iter().position(|l| l.trim_start().starts_with(&needle(&["#[cfg(", "test)]"])))
    };
    let dbg = needle(&["dbg", "!("]);
    let todo = [needle(&["todo", "!("]), needle(&["unimplemented", "!("])];
    let fixme = needle(&["FIX", "ME"]);
    let unsafe_block = needle(&["unsafe", " {"]);
    let unsafe_impl = needle(&["unsafe", " impl"]);
    let unsafe_fn = needle(&["unsafe", " fn "]);
    let safety = needle(&["SAFETY", ":"]);
    let safety_doc = needle(&["# ", "Safety"]);
    let scratch = [needle(&["temp", "_dir()"]), needle(&["\"/t", "mp/"])];
    let scratch_ok = [needle(&["tidy", ": reads"]), needle(&["tidy", ": kept"])];
    for (i, raw) in lines.iter().enumerate() {
        let code = raw.split("//").next().unwrap_or("");
        let n = i + 1;
        if raw.contains(&dbg) {
            problems.push(Problem { line: n, what: "debugging macro".into() });
        }
        if !in_test(i, test_from) && todo.iter().any(|t| code.contains(t.as_str())) {
            problems.push(Problem { line: n, what: "todo/unimplemented outside tests".into() });
        }
        let makes_scratch = scratch.iter().any(|s| raw.contains(s.as_str()));
        let marked = || {
            let above = lines[..i].iter().rev().take_while(|l| l.trim_start().starts_with("//"));
            let has_mark = |l: &str| scratch_ok.iter().any(|m| l.contains(m.as_str()));
            has_mark(raw) || above.into_iter().any(|l| has_mark(l))
        };
        if makes_scratch && in_test(i, test_from) && !is_helper && !marked() {
            problems.push(Problem {
                line: n,
                what: "a test's file outside a directory removed on drop".into(),
            });
        }
        if raw.contains(&fixme) {
            problems.push(Problem { line: n, what: "fix-me marker left in".into() });
        }
        if raw.chars().count() > 100 {
            problems.push(Problem { line: n, what: "line longer than 100 columns".into() });
        }
        if code.contains(&unsafe_block) || code.contains(&unsafe_impl) {
            let above = lines[..i].iter().rev().take_while(|l| {
                let t = l.trim_start();
                t.starts_with("//") || t.starts_with("#[")
            });
            let documented =
                raw.contains(&safety) || above.into_iter().any(|l| l.contains(&safety));
            if !documented {
                problems.push(Problem { line: n, what: "unsafe without // SAFETY:".into() });
            }
        }
        if code.contains(&unsafe_fn) {
            let above = lines[..i].iter().rev().take_while(|l| {
                let t = l.trim_start();
                t.starts_with("///") || t.starts_with("#[")
            });
            if !above.into_iter().any(|l| l.contains(&safety_doc)) {
                problems.push(Problem {
                    line: n,
                    what: "unsafe function lacks a Safety section".into(),
                });
            }
        }
    }
    if is_crate_root {
        let deny = needle(&["#![deny(", "unsafe_code)]"]);
        if !text.contains(&deny) {
            problems.push(Problem { line: 1, what: "crate root does not deny unsafe_code".into() });
        }
    }
    problems
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let name = entry.file_name();
        if path.is_dir() {
            if name != "target" && !name.to_string_lossy().starts_with('.') {
                rust_files(&path, out);
            }
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

#[test]
fn workspace_is_tidy() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
    let mut files = Vec::new();
    rust_files(&root.join("crates"), &mut files);
    assert!(files.len() > 3, "tidy found too few files under {}", root.display());
    let mut report = Vec::new();
    let mut still_not_yet = std::collections::BTreeSet::new();
    for file in &files {
        let text = std::fs::read_to_string(file).expect("read source file");
        let rel = file.strip_prefix(&root).unwrap_or(file).to_string_lossy().to_string();
        let is_test_file = rel.contains("/tests/") || rel.contains("/benches/");
        let is_crate_root = rel.ends_with("/src/lib.rs") || rel.ends_with("/src/main.rs");
        let not_yet = SCRATCH_NOT_YET.iter().find(|dir| rel.starts_with(*dir));
        let is_helper = rel.contains("/tests/common/") || not_yet.is_some();
        if let Some(dir) = not_yet {
            let strict = check_text(&text, is_test_file, is_crate_root, false);
            if strict.iter().any(|p| p.what.starts_with("a test's file")) {
                still_not_yet.insert(*dir);
            }
        }
        for p in check_text(&text, is_test_file, is_crate_root, is_helper) {
            report.push(format!("{rel}:{}: {}", p.line, p.what));
        }
    }
    for dir in SCRATCH_NOT_YET.iter().filter(|d| !still_not_yet.contains(*d)) {
        report.push(format!("{dir}: its tests use the helpers now: take it off SCRATCH_NOT_YET"));
    }
    assert!(report.is_empty(), "tidy problems:\n{}", report.join("\n"));
}

#[test]
fn tidy_catches_each_rule() {
    let whats = |text: &str, test_file: bool, root: bool| -> Vec<String> {
        check_text(text, test_file, root, false).into_iter().map(|p| p.what).collect()
    };
    let dbg_line = needle(&["fn f() { ", "dbg", "!(1); }"]);
    assert_eq!(whats(&dbg_line, true, false), ["debugging macro"]);
    let todo_line = needle(&["fn f() { ", "todo", "!() }"]);
    assert_eq!(whats(&todo_line, false, false), ["todo/unimplemented outside tests"]);
    assert!(whats(&todo_line, true, false).is_empty(), "todo is fine in a test file");
    let cfg_test = needle(&["#[cfg(", "test)]"]);
    let in_test_mod = format!("fn g() {{}}\n{cfg_test}\nmod t {{ {todo_line} }}");
    assert!(whats(&in_test_mod, false, false).is_empty(), "todo is fine after cfg(test)");
    let bare = needle(&["let x = ", "unsafe", " { f() };"]);
    assert_eq!(whats(&bare, false, false), ["unsafe without // SAFETY:"]);
    let documented = format!("// {} f has no preconditions.\n{bare}", needle(&["SAFETY", ":"]));
    assert!(whats(&documented, false, false).is_empty());
    let bare_fn = needle(&["pub ", "unsafe", " fn f() {}"]);
    assert_eq!(whats(&bare_fn, false, false), ["unsafe function lacks a Safety section"]);
    let doc_fn = format!("/// {}\n/// p must be valid.\n{bare_fn}", needle(&["# ", "Safety"]));
    assert!(whats(&doc_fn, false, false).is_empty());
    assert_eq!(whats("fn main() {}", false, true), ["crate root does not deny unsafe_code"]);
    let long = format!("// {}", "x".repeat(120));
    assert_eq!(whats(&long, false, false), ["line longer than 100 columns"]);
    let scratch = needle(&["let p = std::env::temp", "_dir().join(\"x\");"]);
    assert_eq!(whats(&scratch, true, false), ["a test's file outside a directory removed on drop"]);
    let fixed = needle(&["const P: &str = \"/t", "mp/x\";"]);
    assert_eq!(whats(&fixed, true, false), ["a test's file outside a directory removed on drop"]);
    assert!(whats(&scratch, false, false).is_empty(), "the product's own use");
    let in_helper = check_text(&scratch, true, false, true);
    assert!(in_helper.is_empty(), "the helpers make the directories");
    let marked = format!("{scratch} // {}: it only looks", needle(&["tidy", ": reads"]));
    assert!(whats(&marked, true, false).is_empty());
    let above = format!("// It only looks ({}).\n{scratch}", needle(&["tidy", ": reads"]));
    assert!(whats(&above, true, false).is_empty());
}

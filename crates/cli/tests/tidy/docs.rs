//! Tidy for documents: the project's docs and comments describe the system as it is now.
//!
//! - docs/benchmarks.md stays under [`BENCHMARKS_MAX_LINES`] lines: one current table per
//!   benchmark, replaced when re-measured, not a journal of every run.
//! - No machine name and no story of how the work went in docs/, README.md, or the source
//!   of any crate: numbered sessions or stretches of work, reviews, "before the fix", run
//!   counts ("1 run in 30", "4 of 181 runs"), issue numbers, numbered departures from the
//!   design. The history lives in git; a test named after a bug may tell its story.
//! - Every link and every repository path named in docs/ and README.md points at a file or
//!   directory in the repository.
//!
//! Stories are recognised by their shape (an ordinal or "this"/"same"/"last" before
//! "session", a count before "runs in"), so the words' ordinary uses pass: a Linux session,
//! a run of pages, a long stretch, an ioctl issued.

use std::path::{Path, PathBuf};

/// docs/benchmarks.md must have fewer lines than this.
const BENCHMARKS_MAX_LINES: usize = 600;

/// Words that, before "session" or "stretch", make it a stretch of the project's work.
const DEMONSTRATIVES: &[&str] =
    &["this", "that", "same", "next", "last", "previous", "earlier", "later"];

/// Where the bare repository paths a document names start.
const PATH_PREFIXES: &[&str] = &["crates/", "bench/", "docs/", "examples/", ".ci/"];

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The words of a line, lowercased: runs of letters, digits, `-`, `'` and `#`.
fn words(line: &str) -> Vec<String> {
    line.to_lowercase()
        .split(|c: char| !(c.is_alphanumeric() || c == '-' || c == '\'' || c == '#'))
        .map(|w| w.trim_matches(|c| c == '-' || c == '\''))
        .filter(|w| !w.is_empty())
        .map(str::to_string)
        .collect()
}

/// "first" .. "twelfth", "-teenth", "-tieth", "twenty-first".
fn is_ordinal(word: &str) -> bool {
    let last = word.rsplit('-').next().unwrap_or(word);
    let small = [
        "first", "second", "third", "fourth", "fifth", "sixth", "seventh", "eighth", "ninth",
        "tenth", "eleventh", "twelfth",
    ];
    small.contains(&last) || last.ends_with("teenth") || last.ends_with("tieth")
}

/// A count: digits, or "one" .. "ten".
fn is_count(word: &str) -> bool {
    let small = ["one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"];
    (!word.is_empty() && word.bytes().all(|b| b.is_ascii_digit())) || small.contains(&word)
}

fn marks_work(word: &str) -> bool {
    DEMONSTRATIVES.contains(&word) || is_ordinal(word)
}

/// What in one line tells a story instead of describing the present.
fn story_problems(line: &str) -> Vec<&'static str> {
    let mut found = Vec::new();
    let lower = line.to_lowercase();
    if lower.contains("dev-vm") {
        found.push("a machine name");
    }
    if ["before the fix", "after the fix", "until the fix"].iter().any(|f| lower.contains(f)) {
        found.push("the story of a fix");
    }
    let w = words(line);
    let at = |i: Option<usize>| i.and_then(|i| w.get(i)).map(String::as_str);
    for (i, word) in w.iter().enumerate() {
        let base = word.strip_suffix("'s").unwrap_or(word);
        let prev = at(i.checked_sub(1));
        let prev2 = at(i.checked_sub(2));
        let next = at(Some(i + 1));
        let story = match base {
            "session" | "sessions" => {
                prev.is_some_and(marks_work)
                    || (prev == Some("the") && (word.ends_with("'s") || prev2 == Some("of")))
            }
            "stretch" | "stretches" => prev.is_some_and(marks_work),
            "departure" | "departures" => true,
            "issue" => {
                next.is_some_and(|n| is_count(n.trim_start_matches('#').trim_end_matches("'s")))
                    || (prev == Some("the") && word.ends_with("'s"))
            }
            "run" | "runs" => {
                let n_in_m = prev.is_some_and(is_count)
                    && next.is_some_and(|n| n == "in" || n == "of")
                    && at(Some(i + 2)).is_some_and(is_count);
                let n_of_m = base == "runs"
                    && prev.is_some_and(is_count)
                    && prev2 == Some("of")
                    && at(i.checked_sub(3)).is_some_and(is_count);
                n_in_m || n_of_m
            }
            "review" => prev.is_some_and(|p| ["the", "this", "that"].contains(&p)) || word != base,
            _ => false,
        };
        if story {
            found.push(match base {
                "session" | "sessions" | "stretch" | "stretches" => "a stretch of work",
                "departure" | "departures" => "a numbered departure",
                "issue" => "an issue",
                "run" | "runs" => "a run count",
                _ => "a review",
            });
        }
    }
    found.dedup();
    found
}

/// Every repository reference of one document line that names nothing in the repository.
/// `dir` is the document's directory, for its Markdown links.
fn missing_references(line: &str, dir: &Path, root: &Path) -> Vec<String> {
    let mut missing = Vec::new();
    let mut rest = line;
    while let Some(at) = rest.find("](") {
        let after = &rest[at + 2..];
        let end = after.find([')', ' ']).unwrap_or(after.len());
        let target = after[..end].split('#').next().unwrap_or("");
        let external = ["http://", "https://", "mailto:"].iter().any(|s| target.starts_with(s));
        if !target.is_empty() && !external && !dir.join(target).exists() {
            missing.push(target.to_string());
        }
        rest = &after[end..];
    }
    let is_path_char = |c: char| c.is_ascii_alphanumeric() || "_./-".contains(c);
    for prefix in PATH_PREFIXES {
        for (at, _) in line.match_indices(prefix) {
            if line[..at].chars().next_back().is_some_and(is_path_char) {
                continue;
            }
            let tail = &line[at..];
            let end = tail.find(|c: char| !is_path_char(c)).unwrap_or(tail.len());
            let path = tail[..end].trim_end_matches(['.', '/']);
            if path.len() > prefix.len() && !root.join(path).exists() {
                missing.push(path.to_string());
            }
        }
    }
    for token in line.split(|c: char| !is_path_char(c)) {
        let token = token.trim_end_matches('.');
        if token.ends_with(".md") && !token.starts_with('.') {
            let found = [dir.join(token), root.join(token), root.join("docs").join(token)];
            if !found.iter().any(|p| p.exists()) {
                missing.push(token.to_string());
            }
        }
    }
    missing.dedup();
    missing
}

fn files_ending(dir: &Path, ext: &str, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            files_ending(&path, ext, out);
        } else if path.extension().is_some_and(|e| e == ext) {
            out.push(path);
        }
    }
}

/// docs/**/*.md and README.md.
fn documents(root: &Path) -> Vec<PathBuf> {
    let mut docs = vec![root.join("README.md")];
    files_ending(&root.join("docs"), "md", &mut docs);
    docs.sort();
    docs
}

fn sources_of(root: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let Ok(crates) = std::fs::read_dir(root.join("crates")) else { panic!("no crates/") };
    for entry in crates.flatten() {
        files_ending(&entry.path().join("src"), "rs", &mut files);
    }
    files.sort();
    files
}

/// `file:line: what` for every story in the files.
fn stories_in(files: &[PathBuf], root: &Path) -> Vec<String> {
    let mut report = Vec::new();
    for file in files {
        let text = std::fs::read_to_string(file).expect("read file");
        let rel = file.strip_prefix(root).unwrap_or(file).display().to_string();
        for (n, line) in text.lines().enumerate() {
            for what in story_problems(line) {
                report.push(format!("{rel}:{}: {what}: {}", n + 1, line.trim()));
            }
        }
    }
    report
}

#[test]
fn benchmarks_md_is_one_current_table_per_benchmark() {
    let path = repo_root().join("docs/benchmarks.md");
    let lines = std::fs::read_to_string(&path).expect("read docs/benchmarks.md").lines().count();
    assert!(
        lines < BENCHMARKS_MAX_LINES,
        "docs/benchmarks.md has {lines} lines (at most {}): replace a table when it is \
         measured again, and leave the history to git",
        BENCHMARKS_MAX_LINES - 1
    );
}

#[test]
fn docs_and_crates_tell_no_story() {
    let root = repo_root();
    let mut files = documents(&root);
    let sources = sources_of(&root);
    assert!(sources.len() > 100, "too few sources under {}", root.display());
    files.extend(sources);
    let report = stories_in(&files, &root);
    assert!(report.is_empty(), "say what is, not how it came to be:\n{}", report.join("\n"));
}

#[test]
fn docs_point_at_files_in_the_repository() {
    let root = repo_root();
    let mut report = Vec::new();
    for doc in documents(&root) {
        let text = std::fs::read_to_string(&doc).expect("read document");
        let dir = doc.parent().unwrap_or(&root);
        let rel = doc.strip_prefix(&root).unwrap_or(&doc).display().to_string();
        for (n, line) in text.lines().enumerate() {
            for missing in missing_references(line, dir, &root) {
                report.push(format!("{rel}:{}: no such file: {missing}", n + 1));
            }
        }
    }
    assert!(report.is_empty(), "documents name files the repository lacks:\n{}", report.join("\n"));
}

#[test]
fn the_document_checks_catch_each_rule() {
    let stories = [
        ("measured on dev-vm", "a machine name"),
        ("the test failed before the fix", "the story of a fix"),
        ("until the ninth session", "a stretch of work"),
        ("(same session)", "a stretch of work"),
        ("the twenty-first session's build", "a stretch of work"),
        ("at the end of the session", "a stretch of work"),
        ("the third stretch of work", "a stretch of work"),
        ("ARCHITECTURE.md departure 26", "a numbered departure"),
        ("issue 5's ratio", "an issue"),
        ("as issue #7 asks", "an issue"),
        ("the issue's targets", "an issue"),
        ("about 1 run in 30 under load", "a run count"),
        ("failed 3 of 30 runs", "a run count"),
        ("met in two runs of three", "a run count"),
        ("the review of fb93467", "a review"),
        ("the review's mend", "a review"),
    ];
    for (line, what) in stories {
        assert_eq!(story_problems(line), [what], "{line:?}");
    }
    let present = [
        "in a session of their own, autogroup nice 19",
        "uswap run shares the program's session",
        "off the CPU for a long stretch",
        "page-outs go out as runs of 16 pages",
        "a run of up to 16 in one call",
        "the ioctl is issued on the event uffd",
        "the cluster's order; no session state is kept",
        "40 runs of the seeds, swarm options",
    ];
    for line in present {
        assert!(story_problems(line).is_empty(), "{line:?}: {:?}", story_problems(line));
    }

    let root = repo_root();
    let docs = root.join("docs");
    let good = "see [the design](ARCHITECTURE.md), crates/frontend/src/fence.rs and bench/probes/.";
    assert!(missing_references(good, &docs, &root).is_empty());
    let link = "the [style](STYLE.md) and [x](https://example.invalid/STYLE)";
    assert_eq!(missing_references(link, &docs, &root), ["STYLE.md"]);
    let bare = "in crates/uffd/src/nowhere.rs, and (see reference/kernel-swap.md)";
    assert_eq!(
        missing_references(bare, &docs, &root),
        ["crates/uffd/src/nowhere.rs", "reference/kernel-swap.md"]
    );
    let churn = "`examples/raw_churn` runs";
    assert_eq!(missing_references(churn, &docs, &root), ["examples/raw_churn"]);
}
